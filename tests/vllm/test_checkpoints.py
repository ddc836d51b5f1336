"""Checkpoints ``lowbit convert`` writes, loaded by a real vLLM (the CPU build).

SmolLM2-135M is converted with :func:`lowbit.io.convert.convert` and each format vLLM's CPU build
can run is started once, in a child process with a timeout (this file is also that child's
driver: ``python tests/vllm/test_checkpoints.py SPEC OUT``), engine and worker in one process so
the driver can look at the loaded model (``LLM.apply_model``):

* ``int4 --layout compressed-tensors`` (float16: vLLM's CPU WNA16 kernel has no float32 path;
  fp16 holds INTx's scales exactly): greedy ids, and the weight vLLM computes with, read back
  through its own linear method (an identity input), equal to lowbit's dequantized weight rounded
  to the run's dtype, bit for bit.
* ``fp8-block`` (bfloat16; vLLM refuses float32 for fp8): on a CPU with AMX vLLM's own kernel runs
  (ids checked); elsewhere, as for nvfp4 below, a reference decodes the weight vLLM loaded by
  vLLM's fused 128x128 block rule, and that weight is lowbit's bit for bit (the fused q / k / v
  included, whose parts are not 128-row aligned).
* ``nvfp4``: vLLM's CPU build has no NVFP4 linear kernel, so vLLM's kernel choice is replaced by a
  reference that decodes vLLM's loaded parameters with lowbit's NVFP4 and runs ``F.linear``. Checked:
  vLLM accepts the configs (W4A16 from ``config.json``; ``hf_quant_config.json`` too), its loader
  maps every tensor (``qkv_proj`` / ``gate_up_proj`` hold the q, k, v / gate, up bytes in order, the
  one shared global scale), and the model generates.

The reference for the ids is the Hugging Face model with lowbit's dequantized weights in float32
(``transformers``), run on vLLM's own continuation: every token vLLM picked must be the
reference's argmax or within :data:`TIE` logits of it (vLLM runs in fp16 / bf16, where near-ties
can flip; the counts are reported). ``int2`` / ``int8`` / ``mxfp4``
checkpoints have no vLLM CPU kernel: their configs are checked against vLLM's and
compressed-tensors' own parsers, and their tensors read through vLLM's own unpacker (int) and
compressed-tensors' decompressors (int, MXFP4), bit for bit.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

PROMPTS = ("The capital of France is", "def fibonacci(n):", "Water boils at a temperature of")
NEW_TOKENS = 12
#: every greedy token vLLM picks must be within this many logits of the float32 Hugging Face
#: reference's best on the same prefix (vLLM runs fp16 / bf16: near-ties may flip; a wrong weight
#: moves logits by whole units)
TIE = 0.25
TIMEOUT_S = 400
#: one decoder layer probed bit for bit (every quantized linear of it); layer 0 and the last
PROBE_LAYERS = (0, 29)


# ---------------------------------------------------------------------------------- the driver
class _Reference:
    """Stands in for vLLM's GEMM kernel where its CPU build has none: lowbit decodes the
    parameters vLLM loaded (in vLLM's fused layout, by vLLM's rule), once, and ``F.linear`` runs."""

    def input_quant_key(self):
        return None

    def process_weights_after_loading(self, layer):
        pass

    def apply_weights(self, layer, x, bias=None):
        import torch.nn.functional as F

        w = getattr(layer, "_lowbit_reference_weight", None)
        if w is None or w.dtype != x.dtype:
            w = self.decode(layer).dequantize(x.dtype)
            layer._lowbit_reference_weight = w
        return F.linear(x, w, bias)


class _Nvfp4Reference(_Reference):
    def decode(self, layer):
        from lowbit.formats import NVFP4

        return NVFP4(layer.weight, layer.weight_scale, layer.weight_global_scale.reshape(()).float())


class _Fp8BlockReference(_Reference):
    """vLLM's block rule: the fused weight's element (r, c) takes ``weight_scale_inv[r // 128, c // 128]``."""

    def decode(self, layer):
        from lowbit.formats import FP8

        return FP8(layer.weight, layer.weight_scale_inv.float(), "block", 128)


def _probe(model, layers, dtype):
    """For each quantized linear of the given decoder layers: the weight vLLM computes with, as
    ``apply(identity)``, transposed to ``[N, K]`` (float32 copy of the run's dtype)."""
    import torch

    out = {}
    for i in layers:
        layer = model.model.layers[i]
        for name, mod in (("self_attn.qkv_proj", layer.self_attn.qkv_proj), ("self_attn.o_proj", layer.self_attn.o_proj),
                          ("mlp.gate_up_proj", layer.mlp.gate_up_proj), ("mlp.down_proj", layer.mlp.down_proj)):
            eye = torch.eye(mod.input_size_per_partition, dtype=getattr(torch, dtype))
            with torch.no_grad():
                y = mod.quant_method.apply(mod, eye)
            out[f"model.layers.{i}.{name}"] = y.t().float().contiguous()
    return out


def _params(model, layers):
    """The raw NVFP4 parameters vLLM loaded for the probed layers."""
    out = {}
    for i in layers:
        layer = model.model.layers[i]
        for name, mod in (("self_attn.qkv_proj", layer.self_attn.qkv_proj), ("mlp.gate_up_proj", layer.mlp.gate_up_proj),
                          ("self_attn.o_proj", layer.self_attn.o_proj), ("mlp.down_proj", layer.mlp.down_proj)):
            out[f"model.layers.{i}.{name}"] = {"weight": mod.weight.detach().clone(), "weight_scale": mod.weight_scale.detach().clone(),
                                               "weight_global_scale": mod.weight_global_scale.detach().clone()}
    return out


def drive(spec_path: str, out_path: str) -> None:
    """The child: one vLLM start on ``spec["model"]``; writes ids, the probe and the loaded params."""
    import torch

    with open(spec_path) as f:
        spec = json.load(f)
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    if spec.get("reference") == "nvfp4":
        from vllm.model_executor.layers.quantization import modelopt

        modelopt.select_linear_kernel = lambda *a, **k: _Nvfp4Reference()
    if spec.get("reference") == "fp8-block":
        from vllm.model_executor.layers.quantization import fp8

        fp8.init_fp8_linear_kernel = lambda *a, **k: _Fp8BlockReference()
    from vllm import LLM, SamplingParams

    llm = LLM(model=spec["model"], dtype=spec["dtype"], enforce_eager=True, max_num_seqs=1, max_model_len=256, seed=0,
              distributed_executor_backend="uni")
    params = SamplingParams(temperature=0.0, max_tokens=spec["new_tokens"], ignore_eos=True)
    outs = llm.generate([{"prompt_token_ids": p} for p in spec["prompts"]], params, use_tqdm=False)
    result = {"ids": [list(o.outputs[0].token_ids) for o in outs], "text": [o.outputs[0].text for o in outs],
              "quant_method": type(llm.apply_model(lambda m: m.model.layers[0].self_attn.qkv_proj.quant_method)[0]).__name__}
    tensors = {"probe": llm.apply_model(lambda m: _probe(m, spec["layers"], spec["dtype"]))[0]}
    if spec.get("reference") == "nvfp4":
        tensors["params"] = llm.apply_model(lambda m: _params(m, spec["layers"]))[0]
    torch.save(tensors, out_path + ".pt")
    with open(out_path, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    drive(sys.argv[1], sys.argv[2])
    sys.exit(0)


# ----------------------------------------------------------------------------------- the tests
def run_vllm(folder: str, dtype: str, prompts: list[list[int]], tmp, *, reference: str | None = None) -> dict:
    """One vLLM start in a child process; its results (ids, text, probe, params)."""
    import torch

    spec, out, log = (str(tmp / n) for n in ("spec.json", "out.json", "log.txt"))
    with open(spec, "w") as f:
        json.dump({"model": folder, "dtype": dtype, "prompts": prompts, "new_tokens": NEW_TOKENS, "layers": list(PROBE_LAYERS),
                   "reference": reference}, f)
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)  # set by tests/conftest.py without a GPU; vLLM runs as a user runs it
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    with open(log, "w") as logf:
        try:
            rc = subprocess.run([sys.executable, os.path.abspath(__file__), spec, out], env=env, stdout=logf,
                                stderr=subprocess.STDOUT, timeout=TIMEOUT_S).returncode
        except subprocess.TimeoutExpired:
            rc = None
    if rc != 0 or not os.path.isfile(out):
        with open(log, errors="replace") as f:
            tail = "".join(f.readlines()[-30:])
        pytest.fail(f"vLLM on {folder} ({dtype}) {'timed out' if rc is None else f'exited with {rc}'}; last lines:\n{tail}")
    with open(out) as f:
        result = json.load(f)
    result.update(torch.load(out + ".pt"))
    return result


@pytest.fixture(scope="module")
def source(smollm2_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(smollm2_dir)
    return smollm2_dir, [list(tok(p)["input_ids"]) for p in PROMPTS]


def _convert(src, out, fmt, **kw):
    from lowbit.io.convert import convert

    return convert(src, out, fmt, **kw)


def _dequantized(folder: str) -> dict:
    """``{module: lowbit's dequantized fp32 weight}`` of every quantized linear of a converted folder."""
    from lowbit.io import DENSE, load_checkpoint, read_layer

    ck = load_checkpoint(folder)
    out = {}
    for name in ck.tensors:
        prefix, _, leaf = name.rpartition(".")
        if leaf in ("weight_scale_2", "weight_shape", "weight_scale_inv") and prefix not in out:
            layer = read_layer(ck.tensors, prefix)
            assert layer.variant != DENSE
            out[prefix] = layer.fmt.dequantize()
    return out


def _hf_gaps(src: str, weights: dict, prompts: list[list[int]], ids: list[list[int]]) -> list[list[float]]:
    """Teacher-forced on vLLM's own continuation: per generated token, how far (in logits) its
    logit is below the best one of the Hugging Face model (float32) with ``weights`` in place."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
    params = dict(model.named_parameters())
    for prefix, w in weights.items():
        params[f"{prefix}.weight"].data.copy_(w)
    gaps = []
    with torch.no_grad():
        for p, g in zip(prompts, ids):
            logits = model(torch.tensor([p + g])).logits[0, len(p) - 1:-1].double()
            gaps.append((logits.max(-1).values - logits.gather(1, torch.tensor(g)[:, None])[:, 0]).tolist())
    return gaps


def _fused(deq: dict, module: str) -> "torch.Tensor":  # noqa: F821
    import torch

    parent, _, leaf = module.rpartition(".")
    parts = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}.get(leaf, (leaf,))
    return torch.cat([deq[f"{parent}.{p}"] for p in parts])


def _check_ids(name, src, deq, prompts, ids, report):
    gaps = _hf_gaps(src, deq, prompts, ids)
    exact = sum(g == 0 for row in gaps for g in row)
    worst = max(g for row in gaps for g in row)
    report(f"{name}: {exact} of {sum(map(len, gaps))} greedy tokens are the fp32 HF reference's argmax on vLLM's prefix, "
           f"the others within {worst:.3f} logits")
    assert [len(g) for g in ids] == [NEW_TOKENS] * len(PROMPTS)
    assert worst <= TIE, f"{name}: vLLM chose a token {worst:.3f} logits below the reference's best: gaps {gaps}"


def _check_probe(name, probe, deq, dtype):
    import torch

    assert probe, f"{name}: nothing probed"
    for module, w in probe.items():
        want = _fused(deq, module).to(dtype).float()
        assert w.shape == want.shape, module
        bad = (w != want).sum().item()
        assert bad == 0, f"{name}: {module}: {bad} of {w.numel()} weights differ from lowbit's (max |d| {(w - want).abs().max():.3g})"


def _has_amx() -> bool:
    import torch

    return bool(getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)())


def test_vllm_int4_compressed_tensors(source, tmp_path, vllm_report):
    import torch

    src, prompts = source
    out = str(tmp_path / "int4")
    summary = _convert(src, out, "int4", layout="compressed-tensors", group_size=64)
    assert "on CPU" in summary.vllm and "cannot" not in summary.vllm
    deq = _dequantized(out)
    assert len(deq) == 30 * 7  # every q/k/v/o/gate/up/down (the head is tied to the embedding)
    got = run_vllm(out, "float16", prompts, tmp_path)
    assert got["quant_method"] == "CompressedTensorsLinearMethod"
    vllm_report(f"int4 compressed-tensors in vLLM (CPUWNA16 kernel, float16): {got['text']}")
    _check_probe("int4", got["probe"], deq, torch.float16)
    _check_ids("int4 compressed-tensors (float16)", src, deq, prompts, got["ids"], vllm_report)


def test_vllm_fp8_block(source, tmp_path, vllm_report):
    """vLLM's CPU FP8 block kernels need AMX; without it a reference decodes vLLM's loaded fused
    weight by vLLM's block rule. SmolLM2's q / k / v (576 / 192 / 192 rows) are not 128-row
    aligned: convert ties their scales so vLLM's fused reading is lowbit's."""
    import torch

    src, prompts = source
    out = str(tmp_path / "fp8")
    summary = _convert(src, out, "fp8-block")
    assert "AMX" in summary.vllm and "cannot read" not in summary.vllm
    deq = _dequantized(out)
    assert len(deq) == 30 * 7
    reference = None if _has_amx() else "fp8-block"
    got = run_vllm(out, "bfloat16", prompts, tmp_path, reference=reference)
    assert got["quant_method"] == "Fp8LinearMethod"
    vllm_report(f"fp8-block in vLLM ({'its AMX kernel' if reference is None else 'loader + lowbit reference kernel'}, "
                f"bfloat16): {got['text']}")
    if reference is not None:  # vLLM's own kernel quantizes the activations too: no bit-exact probe there
        _check_probe("fp8-block", got["probe"], deq, torch.bfloat16)
    _check_ids("fp8-block (bfloat16)", src, deq, prompts, got["ids"], vllm_report)


def test_vllm_maps_every_nvfp4_tensor(source, tmp_path, vllm_report):
    import torch
    from safetensors.torch import load_file
    from vllm.model_executor.layers.quantization.modelopt import ModelOptNvFp4Config

    src, prompts = source
    out = str(tmp_path / "nvfp4")
    summary = _convert(src, out, "nvfp4")
    assert "NVIDIA GPUs" in summary.vllm
    with open(os.path.join(out, "config.json")) as f:
        qc = json.load(f)["quantization_config"]
    with open(os.path.join(out, "hf_quant_config.json")) as f:
        hq = json.load(f)
    assert ModelOptNvFp4Config.from_config(qc).quant_method == "W4A16_NVFP4"
    legacy = ModelOptNvFp4Config.from_config(hq)  # refused without kv_cache_quant_algo before
    assert legacy.group_size == 16 and legacy.is_checkpoint_nvfp4_serialized
    got = run_vllm(out, "bfloat16", prompts, tmp_path, reference="nvfp4")
    assert got["quant_method"] == "ModelOptLinearMethod"
    ck = load_file(os.path.join(out, "model.safetensors"))
    for module, p in got["params"].items():
        parent, _, leaf = module.rpartition(".")
        parts = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}.get(leaf, (leaf,))
        names = [f"{parent}.{x}" for x in parts]
        assert torch.equal(p["weight"], torch.cat([ck[f"{n}.weight"] for n in names])), module
        assert torch.equal(p["weight_scale"].view(torch.uint8), torch.cat([ck[f"{n}.weight_scale"] for n in names]).view(torch.uint8)), module
        scales = {float(ck[f"{n}.weight_scale_2"]) for n in names}
        assert len(scales) == 1 and float(p["weight_global_scale"]) == scales.pop(), module
    deq = _dequantized(out)
    _check_probe("nvfp4", got["probe"], deq, torch.bfloat16)
    vllm_report(f"nvfp4 in vLLM (loader + lowbit's NVFP4 reference kernel, bfloat16): {got['text']}")
    _check_ids("nvfp4 (bfloat16)", src, deq, prompts, got["ids"], vllm_report)


@pytest.mark.parametrize("fmt", ["int2", "int8", "mxfp4"])
def test_configs_without_a_cpu_kernel_parse_in_vllm(source, tmp_path, fmt):
    from compressed_tensors.quantization import QuantizationConfig
    from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors import CompressedTensorsConfig
    from vllm.model_executor.layers.quantization.compressed_tensors.schemes import CompressedTensorsWNA16

    src, _ = source
    out = str(tmp_path / fmt)
    # only layer 0 quantized: the config is what is checked here
    summary = _convert(src, out, fmt, layout="compressed-tensors", group_size=64, exclude=["model.layers.[!0].*", "model.layers.??.*"])
    assert [t.name.split(".")[2] for t in summary.quantized] == ["0"] * 7
    with open(os.path.join(out, "config.json")) as f:
        qc = json.load(f)["quantization_config"]
    assert "model.layers.1.mlp.down_proj" in qc["ignore"]
    QuantizationConfig.model_validate(qc)  # compressed-tensors' own schema
    cfg = CompressedTensorsConfig.from_config(dict(qc))
    weights = cfg.target_scheme_map["Linear"]["weights"]
    assert cfg.target_scheme_map["Linear"]["input_activations"] is None
    if fmt == "mxfp4":
        assert CompressedTensorsConfig._is_mxfp4(weights)
        assert "GPU" in summary.vllm
    else:
        scheme = cfg._get_scheme_from_parts(weights, None, None, qc["format"], "model.layers.0.mlp.down_proj")
        assert isinstance(scheme, CompressedTensorsWNA16) and scheme.num_bits == int(fmt[3:]) and not scheme.symmetric
        assert scheme.group_size == 64
        assert ("Hopper" in summary.vllm) if fmt == "int8" else ("no built-in kernel" in summary.vllm)


@pytest.mark.parametrize("bits", [2, 4, 8])
def test_vllm_and_compressed_tensors_unpack_lowbits_int_tensors(bits):
    """No vLLM start: vLLM's own unpacker (what its CPU / Marlin repacking starts from) and
    compressed-tensors' decompressor read write_int_ct's tensors as lowbit's values, bit for bit."""
    import torch
    from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
    from vllm.model_executor.layers.quantization.utils.quant_utils import unpack_quantized_values_into_int32
    from vllm.scalar_type import scalar_types

    from lowbit.formats import INTx
    from lowbit.io import write_int_ct

    n, k, g = 72, 320, 64
    q = INTx.quantize(torch.randn(n, k, generator=torch.Generator().manual_seed(bits)), bits, g)
    sd = write_int_ct(q, "x")
    wtype = {2: scalar_types.uint2, 4: scalar_types.uint4, 8: scalar_types.uint8}[bits]
    codes = unpack_quantized_values_into_int32(sd["x.weight_packed"], wtype, packed_dim=1)[:, :k]
    zero = unpack_quantized_values_into_int32(sd["x.weight_zero_point"], wtype, packed_dim=0)[:n]
    scale = sd["x.weight_scale"].float()
    vllm_w = (codes - zero.repeat_interleave(g, 1)[:, :k]).float() * scale.repeat_interleave(g, 1)[:, :k]
    assert torch.equal(vllm_w, q.dequantize())
    scheme = QuantizationScheme(targets=["Linear"], weights=QuantizationArgs(
        num_bits=bits, type="int", symmetric=False, strategy="group", group_size=g))
    local = {name[2:]: t for name, t in sd.items()}
    local["weight_scale"] = local["weight_scale"].float()
    assert torch.equal(PackedQuantizationCompressor.decompress(local, scheme)["weight"].float(), q.dequantize())


def test_compressed_tensors_decompresses_lowbits_mxfp4():
    import torch
    from compressed_tensors.compressors.mxfp4.base import MXFP4PackedCompressor
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme

    from lowbit.formats import MXFP4
    from lowbit.io import write_mxfp4_ct

    q = MXFP4.quantize(torch.randn(40, 256, generator=torch.Generator().manual_seed(5)) * 3)
    sd = write_mxfp4_ct(q, "x")
    scheme = QuantizationScheme(targets=["Linear"], weights=QuantizationArgs(
        num_bits=4, type="float", symmetric=True, strategy="group", group_size=32))
    got = MXFP4PackedCompressor.decompress({name[2:]: t for name, t in sd.items()}, scheme)["weight"]
    assert torch.equal(got.float(), q.dequantize())
