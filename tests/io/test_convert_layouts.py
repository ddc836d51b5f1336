"""lowbit.io.convert: the layouts engines load (compressed-tensors int / MXFP4, weight-only ModelOpt
NVFP4 with shared global scales for fused siblings) and what convert says about vLLM."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from lowbit.formats import MXFP4, NVFP4, INTx
from lowbit.io import INT_CT, MXFP4_CT, NVFP4_MODELOPT, load_checkpoint, read_layer
from lowbit.io.convert import FORMATS, LAYOUTS, convert, vllm_support

ATTN = "model.layers.0.self_attn"
MLP = "model.layers.0.mlp"
SHAPES = {
    "model.embed_tokens.weight": (96, 64),
    f"{ATTN}.q_proj.weight": (64, 64),
    f"{ATTN}.k_proj.weight": (32, 64),
    f"{ATTN}.v_proj.weight": (32, 64),
    f"{ATTN}.o_proj.weight": (64, 64),
    f"{MLP}.gate_proj.weight": (128, 64),
    f"{MLP}.up_proj.weight": (128, 64),
    f"{MLP}.down_proj.weight": (64, 128),
    f"{MLP}.router.weight": (4, 64),  # too few rows: kept
    "model.norm.weight": (64,),
}


@pytest.fixture
def src(tmp_path):
    g = torch.Generator().manual_seed(0)
    # different magnitudes per sibling, so per-tensor global scales would differ
    tensors = {name: torch.randn(shape, generator=g) * (0.02 * (1 + i % 3)) for i, (name, shape) in enumerate(SHAPES.items())}
    folder = tmp_path / "src"
    folder.mkdir()
    save_file(tensors, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}))
    return folder, tensors


QUANTIZED = [n[: -len(".weight")] for n, s in SHAPES.items() if len(s) == 2 and "embed" not in n and "router" not in n]


@pytest.mark.parametrize("bits", [2, 4, 8])
def test_int_compressed_tensors_layout_is_the_same_values(src, tmp_path, bits):
    folder, tensors = src
    out = tmp_path / "ct"
    summary = convert(folder, out, f"int{bits}", group_size=32, layout="compressed-tensors")
    assert summary.layout == "compressed-tensors"
    ck = load_checkpoint(out)
    for prefix in QUANTIZED:
        layer = read_layer(ck.tensors, prefix)
        want = INTx.quantize(tensors[f"{prefix}.weight"], bits, 32)
        assert layer.variant == INT_CT
        assert torch.equal(layer.fmt.packed, want.packed) and torch.equal(layer.fmt.scale, want.scale)
        assert torch.equal(layer.fmt.zero, want.zero)
        assert ck.tensors[f"{prefix}.weight_packed"].dtype == torch.int32
    assert torch.equal(ck.tensors["model.embed_tokens.weight"], tensors["model.embed_tokens.weight"])
    qc = json.loads((out / "config.json").read_text())["quantization_config"]
    assert qc["quant_method"] == "compressed-tensors" and qc["format"] == "pack-quantized"
    w = qc["config_groups"]["group_0"]["weights"]
    assert (w["num_bits"], w["group_size"], w["symmetric"], w["type"], w["strategy"]) == (bits, 32, False, "int", "group")
    assert f"{MLP}.router" in qc["ignore"] and "model.embed_tokens" in qc["ignore"]
    meta = json.loads((out / "lowbit_quant_config.json").read_text())
    assert meta["layout"] == "compressed-tensors" and meta["quantization_config"] == qc and meta["vllm"] == summary.vllm


def test_int_default_layout_says_vllm_cannot_load_it(src, tmp_path):
    folder, _ = src
    summary = convert(folder, tmp_path / "ps", "int4", group_size=32)
    assert summary.layout == "plane-split" and "vLLM cannot load" in summary.vllm and "--layout compressed-tensors" in summary.vllm
    assert "quantization_config" not in json.loads((tmp_path / "ps" / "config.json").read_text())
    assert json.loads((tmp_path / "ps" / "lowbit_quant_config.json").read_text())["layout"] == "plane-split"


def test_mxfp4_compressed_tensors_layout(src, tmp_path):
    folder, tensors = src
    summary = convert(folder, tmp_path / "mx", "mxfp4", layout="compressed-tensors")
    ck = load_checkpoint(tmp_path / "mx")
    for prefix in QUANTIZED:
        layer = read_layer(ck.tensors, prefix)
        assert layer.variant == MXFP4_CT
        assert torch.equal(layer.fmt.dequantize(), MXFP4.quantize(tensors[f"{prefix}.weight"]).dequantize())
    qc = json.loads((tmp_path / "mx" / "config.json").read_text())["quantization_config"]
    assert qc["format"] == "mxfp4-pack-quantized" and qc["config_groups"]["group_0"]["weights"]["group_size"] == 32
    assert "GPU" in summary.vllm and "CPU build has no MXFP4" in summary.vllm
    default = convert(folder, tmp_path / "ds", "mxfp4")
    assert default.layout is None or default.layout == "deepseek"
    assert "does not load" in default.vllm


def test_nvfp4_fused_siblings_share_one_global_scale(src, tmp_path):
    folder, tensors = src
    convert(folder, tmp_path / "nv", "nvfp4")
    got = load_file(str(tmp_path / "nv" / "model.safetensors"))

    def gs(prefix):
        return got[f"{prefix}.weight_scale_2"]

    for siblings in ([f"{ATTN}.q_proj", f"{ATTN}.k_proj", f"{ATTN}.v_proj"], [f"{MLP}.gate_proj", f"{MLP}.up_proj"]):
        amax = max(float(tensors[f"{p}.weight"].abs().amax()) for p in siblings)
        own = [NVFP4.quantize(tensors[f"{p}.weight"]).global_scale for p in siblings]
        assert len({float(x) for x in own}) > 1  # the fixture gives the siblings different scales
        shared = gs(siblings[0])
        assert shared == pytest.approx(amax / (6 * 448), rel=1e-6)
        for p in siblings:
            assert gs(p).view(torch.int32).item() == shared.view(torch.int32).item(), p
            want = NVFP4.quantize(tensors[f"{p}.weight"], shared)
            assert torch.equal(got[f"{p}.weight"], want.packed) and torch.equal(got[f"{p}.weight_scale"].view(torch.uint8),
                                                                                 want.scale.view(torch.uint8))
    # modules without siblings keep their own scale
    for p in (f"{ATTN}.o_proj", f"{MLP}.down_proj"):
        assert gs(p).item() == NVFP4.quantize(tensors[f"{p}.weight"]).global_scale.item()
        assert read_layer(got, p).variant == NVFP4_MODELOPT


def test_nvfp4_configs_vllm_accepts(src, tmp_path):
    folder, _ = src
    summary = convert(folder, tmp_path / "nv", "nvfp4")
    hq = json.loads((tmp_path / "nv" / "hf_quant_config.json").read_text())["quantization"]
    assert {"group_size", "kv_cache_quant_algo", "exclude_modules"} <= set(hq)  # vLLM's required fields
    qc = json.loads((tmp_path / "nv" / "config.json").read_text())["quantization_config"]
    assert qc["quant_method"] == "modelopt" and qc["quant_algo"] == "NVFP4"
    assert all(g["input_activations"] is None for g in qc["config_groups"].values())  # weight-only: W4A16
    assert f"{MLP}.router" in qc["ignore"] and f"{MLP}.router" in hq["exclude_modules"]
    assert "NVIDIA GPUs" in summary.vllm and "no NVFP4 linear kernel" in summary.vllm


def test_layout_and_group_size_refusals(src, tmp_path):
    folder, _ = src
    with pytest.raises(ValueError, match="format fp8-block is written in layout deepseek, not 'compressed-tensors'"):
        convert(folder, tmp_path / "x", "fp8-block", layout="compressed-tensors")
    with pytest.raises(ValueError, match="format int4 is written in layout plane-split or compressed-tensors, not 'gptq'"):
        convert(folder, tmp_path / "x", "int4", layout="gptq")
    with pytest.raises(ValueError, match=r"multiple of the group size 48 .*o_proj.weight \[64, 64\]"):
        convert(folder, tmp_path / "x", "int4", group_size=48, layout="compressed-tensors")
    assert not (tmp_path / "x").exists()
    convert(folder, tmp_path / "y", "int4", group_size=48)  # plane-split pads K: any multiple of 16


def test_vllm_support_covers_every_format_and_layout():
    seen = set()
    for fmt in FORMATS:
        for layout in LAYOUTS[fmt]:
            where, msg = vllm_support(fmt, layout)
            assert where in ("cpu+gpu", "gpu", "no") and msg.startswith("vLLM")
            seen.add((fmt, layout, where))
    assert ("fp8-block", "deepseek", "cpu+gpu") in seen and ("int4", "compressed-tensors", "cpu+gpu") in seen
    assert {(f, "plane-split", "no") for f in ("int2", "int4", "int8")} <= seen
    assert ("int2", "compressed-tensors", "no") in seen and ("nvfp4", "modelopt", "gpu") in seen


def _vllm_fused_read(parts: list) -> torch.Tensor:
    """How vLLM reads fused FP8 128x128 blocks (checked against vLLM 0.32's loader): part i's scale
    rows are copied to fused scale rows ceil(off_i / 128) on, later parts overwriting; the fused
    weight row R, column C takes fused scale [R // 128, C // 128]."""
    rows = [p.data.shape[0] for p in parts]
    k = parts[0].data.shape[1]
    fused = torch.zeros(-(-sum(rows) // 128), -(-k // 128))
    off = 0
    for p, n in zip(parts, rows):
        start = -(-off // 128)
        fused[start:start + p.scale.shape[0]] = p.scale
        off += n
    data = torch.cat([p.data.float() for p in parts])
    return data * fused.repeat_interleave(128, 0).repeat_interleave(128, 1)[: data.shape[0], :k]


@pytest.mark.parametrize("rows", [(576, 192, 192), (1536, 1536), (100, 100), (64, 64, 64), (384, 64, 64), (64, 300)])
def test_fp8_fused_block_scales_mean_the_same_to_vllm(rows):
    from lowbit.formats import FP8
    from lowbit.io.convert import fused_block_scales

    g = torch.Generator().manual_seed(sum(rows))
    ws = [torch.randn(n, 200, generator=g) * (1 + i) for i, n in enumerate(rows)]
    own = [FP8.quantize(w, "block", 128) for w in ws]
    scales = fused_block_scales(ws)
    placed = all(-(-sum(rows[:i]) // 128) + -(-n // 128) <= -(-sum(rows) // 128) for i, n in enumerate(rows))
    if not placed:  # vLLM's fused scale tensor cannot hold the parts' scale rows: nothing to tie
        assert scales is None
        return
    parts = []
    for w, s in zip(ws, scales):
        expanded = s.repeat_interleave(128, 0).repeat_interleave(128, 1)[: w.shape[0], : w.shape[1]]
        parts.append(FP8((w / expanded).clamp(-448, 448).to(torch.float8_e4m3fn), s, "block", 128))
    per_part = torch.cat([p.dequantize() for p in parts])
    assert torch.equal(_vllm_fused_read(parts), per_part)
    assert (per_part - torch.cat(ws)).abs().max() <= max(float(s.max()) for s in scales) * 448 / 16  # e4m3: 3 mantissa bits
    if all(n % 128 == 0 for n in rows[:-1]):  # aligned: the parts' own scales, bit for bit
        assert all(torch.equal(s, q.scale) for s, q in zip(scales, own))
    else:  # what per-part scales would do in vLLM
        assert not torch.equal(_vllm_fused_read(own), torch.cat([q.dequantize() for q in own]))


def test_fp8_block_convert_ties_misaligned_fused_scales(tmp_path):
    from lowbit.io import read_layer

    g = torch.Generator().manual_seed(1)
    shapes = {f"{ATTN}.q_proj.weight": (576, 128), f"{ATTN}.k_proj.weight": (192, 128), f"{ATTN}.v_proj.weight": (192, 128),
              f"{ATTN}.o_proj.weight": (128, 576)}
    tensors = {n: torch.randn(s, generator=g) for n, s in shapes.items()}
    folder = tmp_path / "src"
    folder.mkdir()
    save_file(tensors, str(folder / "model.safetensors"))
    summary = convert(folder, tmp_path / "fp8", "fp8-block")
    assert "misreads" not in summary.vllm
    got = load_file(str(tmp_path / "fp8" / "model.safetensors"))
    parts = [read_layer(got, f"{ATTN}.{m}").fmt for m in ("q_proj", "k_proj", "v_proj")]
    assert torch.equal(_vllm_fused_read(parts), torch.cat([p.dequantize() for p in parts]))
    # the tied scales: q's last block row and both of k's hold one scale
    assert torch.equal(parts[0].scale[4], parts[1].scale[0]) and torch.equal(parts[1].scale[0], parts[1].scale[1])
    for m, p in zip(("q_proj", "k_proj", "v_proj"), parts):
        w = tensors[f"{ATTN}.{m}.weight"]
        assert (p.dequantize() - w).abs().max() <= float(p.scale.max()) * 448 / 16


def test_lm_head_listed_for_engines(src, tmp_path):
    """An engine builds an LM head even when the checkpoint has none (tied): configs must say it is
    not quantized; a quantized head is named where compressed-tensors' "Linear" would miss it."""
    folder, tensors = src
    convert(folder, tmp_path / "nv", "nvfp4")
    qc = json.loads((tmp_path / "nv" / "config.json").read_text())["quantization_config"]
    hq = json.loads((tmp_path / "nv" / "hf_quant_config.json").read_text())["quantization"]
    assert "lm_head" in qc["ignore"] and "lm_head" in hq["exclude_modules"]
    convert(folder, tmp_path / "ct", "int4", group_size=32, layout="compressed-tensors")
    qc = json.loads((tmp_path / "ct" / "config.json").read_text())["quantization_config"]
    assert "lm_head" in qc["ignore"] and qc["config_groups"]["group_0"]["targets"] == ["Linear"]

    untied = tmp_path / "untied"
    untied.mkdir()
    save_file(dict(tensors, **{"lm_head.weight": torch.randn(96, 64)}), str(untied / "model.safetensors"))
    (untied / "config.json").write_text(json.dumps({"model_type": "llama"}))
    convert(untied, tmp_path / "nv2", "nvfp4")
    assert "lm_head" not in json.loads((tmp_path / "nv2" / "config.json").read_text())["quantization_config"]["ignore"]
    convert(untied, tmp_path / "ct2", "int4", group_size=32, layout="compressed-tensors")
    qc = json.loads((tmp_path / "ct2" / "config.json").read_text())["quantization_config"]
    assert qc["config_groups"]["group_0"]["targets"] == ["Linear", "lm_head"] and "lm_head" not in qc["ignore"]
    fp8 = convert(untied, tmp_path / "fp8", "fp8-block")
    assert "--exclude lm_head" in fp8.vllm
    qc = json.loads((tmp_path / "fp8" / "config.json").read_text())["quantization_config"]
    assert qc["ignored_layers"] == ["model.embed_tokens", f"{MLP}.router"]  # kept modules vLLM must not read as fp8
    assert "--exclude lm_head" not in convert(untied, tmp_path / "fp8x", "fp8-block", exclude=["lm_head"]).vllm


def test_vllm_support_names_fused_modules_vllm_cannot_read():
    def shapes(*rows):
        return {f"{ATTN}.{m}": (n, 64) for m, n in zip(("q_proj", "k_proj", "v_proj"), rows)}

    # pack-quantized zero-points: 8 rows a word for int4, 4 for int8
    assert "cannot read the packed zero-points" in vllm_support("int4", "compressed-tensors", shapes(100, 32, 32))[1]
    assert "cannot read" not in vllm_support("int4", "compressed-tensors", shapes(96, 32, 36))[1]  # the last part may be ragged
    assert "cannot read the packed zero-points" in vllm_support("int8", "compressed-tensors", shapes(98, 32, 32))[1]
    assert "cannot read" not in vllm_support("int8", "compressed-tensors", shapes(100, 36, 32))[1]
    # fp8 blocks: tied scales serve any split vLLM's fused scale tensor can hold
    assert "cannot read" not in vllm_support("fp8-block", None, shapes(576, 192, 192))[1]
    assert "cannot read the 128x128 block scales" in vllm_support("fp8-block", None, shapes(384, 64, 64))[1]
    # a layout vLLM does not load says only that
    assert "cannot read the" not in vllm_support("int4", "plane-split", shapes(100, 32, 32))[1]
