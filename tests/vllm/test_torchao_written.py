"""Checkpoints written by torchao itself (its safetensors flattening, the one transformers'
``save_pretrained`` uses for a ``TorchAoConfig`` model), read by ``lowbit.io``: every layout lowbit
reads gives, bit for bit, what torchao's own ``dequantize()`` gives; the others are refused with a
``ValueError`` naming the torchao layout.

The weights are quantized by torchao on the CPU (its configs where they run there; where a config
checks for a CUDA GPU first, the tensor subclass it would build, made by the same ``from_hp`` /
``to_mx`` call), flattened by torchao, written with safetensors and read back with
``lowbit.io.load_checkpoint``.
"""
from __future__ import annotations

import warnings

import pytest
import torch

pytest.importorskip("torchao")

warnings.filterwarnings("ignore", module="torchao")

from safetensors.torch import save_file  # noqa: E402
from torchao.prototype.mx_formats import (  # noqa: E402
    MXDynamicActivationMXWeightConfig, NVFP4WeightOnlyConfig,
)
from torchao.prototype.mx_formats.mx_tensor import MXTensor  # noqa: E402
from torchao.prototype.safetensors.safetensors_support import flatten_tensor_state_dict  # noqa: E402
from torchao.quantization import (  # noqa: E402
    Float8Tensor, Float8WeightOnlyConfig, Int8WeightOnlyConfig, IntxWeightOnlyConfig, MappingType, PerAxis,
    PerBlock, PerGroup, PerRow, PerTensor, quantize_,
)

from lowbit.formats import FP8, INTx, MXFP4, NVFP4  # noqa: E402
from lowbit.io import load_checkpoint, read_torchao, torchao_layers  # noqa: E402

P = "model.layers.0.mlp.down_proj"


def _weight(n: int, k: int, dtype=torch.bfloat16, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=g) * torch.logspace(-3, 1, k).roll(seed)  # columns spanning 4 decades
    w[1, :64] = 0  # all-zero blocks
    return w.to(dtype)


def _module(w: torch.Tensor) -> torch.nn.Module:
    m = torch.nn.Module()
    m.down_proj = torch.nn.Linear(w.shape[1], w.shape[0], bias=False, dtype=w.dtype)
    m.down_proj.weight.data.copy_(w)
    return m


def _save(tmp_path, quantized: torch.Tensor, name: str = P) -> tuple:
    """Write ``{name}.weight`` the way torchao flattens it; read it back with lowbit."""
    data, meta = flatten_tensor_state_dict({f"{name}.weight": quantized})
    path = tmp_path / "model.safetensors"
    save_file(data, str(path), metadata=meta)
    ck = load_checkpoint(path)
    return ck, read_torchao(ck.tensors, name, ck.quant_config)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view({2: torch.int16, 4: torch.int32}[t.element_size()])


def _assert_exact(layer, quantized) -> None:
    ref = quantized.dequantize()
    assert layer.options["dtype"] == ref.dtype
    got = layer.fmt.dequantize(layer.options["dtype"])
    assert got.shape == ref.shape and got.dtype == ref.dtype
    assert torch.equal(_bits(got), _bits(ref))


def _quantize_linear(w: torch.Tensor, config):
    m = _module(w)
    quantize_(m, config)
    return m.down_proj.weight


# ------------------------------------------------------------------------------------------ float8
@pytest.mark.parametrize("granularity,variant", [
    (PerTensor(), "fp8-tensor-torchao"), (PerRow(), "fp8-row-torchao"), (PerBlock([128, 128]), "fp8-block-torchao"),
    (PerBlock([1, 128]), "fp8-group-torchao"), (PerBlock([64, 64]), "fp8-block-torchao"),
])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_float8_tensor(tmp_path, granularity, variant, dtype):
    # Float8DynamicActivationFloat8WeightConfig asserts a CUDA GPU before building this same subclass
    # (with the activations' quantization kwargs, which land in the header too)
    from torchao.quantization.quantize_.workflows import QuantizeTensorToFloat8Kwargs

    act = QuantizeTensorToFloat8Kwargs(granularity=granularity if isinstance(granularity, (PerRow, PerTensor)) else PerRow())
    q = Float8Tensor.from_hp(_weight(256, 384, dtype), granularity=granularity, act_quant_kwargs=act)
    ck, layer = _save(tmp_path, q)
    assert ck.quant_config["producer"]["name"] == "torchao" and torchao_layers(ck.quant_config) == [P]
    assert isinstance(layer.fmt, FP8) and layer.variant == variant and layer.options["torchao_type"] == "Float8Tensor"
    _assert_exact(layer, q)


def test_float8_weight_only_config(tmp_path):
    q = _quantize_linear(_weight(96, 160), Float8WeightOnlyConfig())
    _, layer = _save(tmp_path, q)
    assert layer.variant == "fp8-row-torchao"
    _assert_exact(layer, q)


def test_float8_e5m2_refused(tmp_path):
    q = Float8Tensor.from_hp(_weight(64, 128), float8_dtype=torch.float8_e5m2, granularity=PerRow())
    with pytest.raises(ValueError, match="torchao Float8Tensor with torch.float8_e5m2 data"):
        _save(tmp_path, q)


# ------------------------------------------------------------------------------------------------ MX
@pytest.mark.parametrize("elem,cls,variant", [
    (torch.float4_e2m1fn_x2, MXFP4, "mxfp4-torchao"), (torch.float8_e4m3fn, FP8, "mxfp8-torchao"),
])
@pytest.mark.parametrize("swizzled", [True, False])
@pytest.mark.parametrize("shape,dtype", [((256, 512), torch.bfloat16), ((200, 320), torch.bfloat16), ((200, 320), torch.float32)])
def test_mx_tensor(tmp_path, elem, cls, variant, swizzled, shape, dtype):  # (200, 320) pads the swizzled scale grid
    w = _weight(*shape, dtype, seed=3)
    if swizzled and shape == (256, 512):
        q = _quantize_linear(w, MXDynamicActivationMXWeightConfig(activation_dtype=elem, weight_dtype=elem))
        assert q.is_swizzled_scales
    else:
        q = MXTensor.to_mx(w, elem, 32, is_swizzled_scales=swizzled)
    _, layer = _save(tmp_path, q)
    assert isinstance(layer.fmt, cls) and layer.variant == variant
    _assert_exact(layer, q)


@pytest.mark.parametrize("elem,name", [(torch.float8_e5m2, "float8_e5m2"), ("fp6_e3m2", "fp6_e3m2"), ("fp6_e2m3", "fp6_e2m3")])
def test_mx_other_elements_refused(tmp_path, elem, name):
    q = MXTensor.to_mx(_weight(64, 128), elem, 32)
    with pytest.raises(ValueError, match=f"torchao MXTensor with {name} elements"):
        _save(tmp_path, q)


# --------------------------------------------------------------------------------------------- NVFP4
@pytest.mark.parametrize("per_tensor", [True, False])
@pytest.mark.parametrize("shape", [(256, 512), (208, 320)])
def test_nvfp4_tensor(tmp_path, per_tensor, shape):
    q = _quantize_linear(_weight(*shape, seed=5), NVFP4WeightOnlyConfig(use_dynamic_per_tensor_scale=per_tensor))
    assert (q.per_tensor_scale is not None) == per_tensor and q.is_swizzled_scales
    _, layer = _save(tmp_path, q)
    assert isinstance(layer.fmt, NVFP4) and layer.variant == "nvfp4-torchao"
    _assert_exact(layer, q)


# ------------------------------------------------------------------------------------------ integers
@pytest.mark.parametrize("bits", [2, 4, 8])
@pytest.mark.parametrize("mapping", [MappingType.SYMMETRIC, MappingType.ASYMMETRIC])
@pytest.mark.parametrize("granularity", [PerGroup(32), PerGroup(128), PerAxis(0)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_intx_unpacked(tmp_path, bits, mapping, granularity, dtype):
    cfg = IntxWeightOnlyConfig(weight_dtype=getattr(torch, f"int{bits}"), granularity=granularity, mapping_type=mapping)
    q = _quantize_linear(_weight(96, 256, dtype, seed=bits), cfg)
    _, layer = _save(tmp_path, q)
    assert isinstance(layer.fmt, INTx) and layer.fmt.bits == bits and layer.variant == "int-torchao"
    _assert_exact(layer, q)


def test_intx_3bit_refused(tmp_path):
    q = _quantize_linear(_weight(64, 128), IntxWeightOnlyConfig(weight_dtype=torch.int3, granularity=PerGroup(32)))
    with pytest.raises(ValueError, match=r"torchao IntxUnpackedToInt8Tensor with target_dtype int3 \(3-bit codes\)"):
        _save(tmp_path, q)


@pytest.mark.parametrize("granularity", [PerRow(), PerTensor()])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_int8_tensor(tmp_path, granularity, dtype):
    """Int8WeightOnlyConfig of a bf16 / fp16 model: its fp32 scales are the model dtype's values
    (fp16 holds them all), so INTx 8-bit reads them exact."""
    q = _quantize_linear(_weight(64, 128, dtype), Int8WeightOnlyConfig(granularity=granularity))
    _, layer = _save(tmp_path, q)
    assert isinstance(layer.fmt, INTx) and layer.fmt.bits == 8 and layer.options["torchao_type"] == "Int8Tensor"
    _assert_exact(layer, q)


def test_int8_tensor_activation_pre_scale(tmp_path):
    """An Int8Tensor carrying a smoothing factor for its activations: the weight reads exact and
    the factor comes back, as stored, in options["activation"]."""
    from torchao.quantization import Int8Tensor

    q0 = _quantize_linear(_weight(64, 128), Int8WeightOnlyConfig())
    pre = torch.rand(128, dtype=torch.bfloat16) + 0.5
    q = Int8Tensor(q0.qdata, q0.scale, q0.block_size, q0.dtype, zero_point=q0.zero_point, act_pre_scale=pre)
    _, layer = _save(tmp_path, q)
    _assert_exact(layer, q)
    assert list(layer.options["activation"]) == ["act_pre_scale"] and torch.equal(layer.options["activation"]["act_pre_scale"], pre)


def test_int8_tensor_fp32_model_refused(tmp_path):
    """Of an fp32 model the scales (amax / 127.5 in fp32) are not fp16 values: refused, naming them."""
    q = _quantize_linear(_weight(64, 128, torch.float32), Int8WeightOnlyConfig())
    with pytest.raises(ValueError, match=r"torchao Int8Tensor: tensor .*_weight_scale.* fp16 cannot hold exactly"):
        _save(tmp_path, q)


def _int4(kind: str, n: int = 64, k: int = 128, g: int = 32):
    """torchao's int4 packings, as Int4WeightOnlyConfig builds them on CUDA / XPU (the subclass
    constructors run on the CPU; the quantizers need mslk or a GPU)."""
    import torchao.quantization as tq

    bf = dict(dtype=torch.bfloat16)
    if kind == "Int4Tensor":
        return tq.Int4Tensor(torch.zeros(n, k // 2, dtype=torch.uint8), torch.ones(k // g, n, **bf), torch.zeros(k // g, n, **bf),
                             [1, g], torch.Size([n, k]))
    if kind == "Int4PlainInt32Tensor":
        return tq.Int4PlainInt32Tensor(torch.zeros(n, k // 8, dtype=torch.int32), torch.ones(k // g, n, **bf),
                                       torch.zeros(k // g, n, dtype=torch.int8), [1, g], torch.Size([n, k]))
    return tq.Int4TilePackedTo4dTensor(torch.zeros(n // 8, k // 64, 32, 4, dtype=torch.int32), torch.zeros(k // g, n, 2, **bf),
                                       [1, g], torch.Size([n, k]))


@pytest.mark.parametrize("kind,why", [("Int4Tensor", "mslk"), ("Int4PlainInt32Tensor", "XPU"), ("Int4TilePackedTo4dTensor", "tinygemm")])
def test_int4_packings_refused(tmp_path, kind, why):
    with pytest.raises(ValueError, match=rf"holds a torchao {kind} \(.*{why}.*\), which lowbit does not read"):
        _save(tmp_path, _int4(kind))


# ----------------------------------------------------------------------------------- a whole model
@pytest.mark.parametrize("name", ["intx", "float8", "int8", "nvfp4", "mxfp4"])
def test_transformers_save_pretrained(tmp_path, name):
    """A tiny Llama quantized by transformers with a TorchAoConfig and saved with
    save_pretrained(safe_serialization=True): every quantized linear reads exact."""
    transformers = pytest.importorskip("transformers")
    fp4 = torch.float4_e2m1fn_x2
    config, variant = {
        "intx": (IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(32)), "int-torchao"),
        "float8": (Float8WeightOnlyConfig(), "fp8-row-torchao"),
        "int8": (Int8WeightOnlyConfig(), "int-torchao"),
        "nvfp4": (NVFP4WeightOnlyConfig(), "nvfp4-torchao"),
        "mxfp4": (MXDynamicActivationMXWeightConfig(activation_dtype=fp4, weight_dtype=fp4), "mxfp4-torchao"),
    }[name]
    cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                   num_attention_heads=4, num_key_value_heads=2)
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(tmp_path / "dense")
    qcfg = transformers.TorchAoConfig(config)
    model = transformers.LlamaForCausalLM.from_pretrained(tmp_path / "dense", quantization_config=qcfg, dtype=torch.bfloat16,
                                                          device_map="cpu")
    model.save_pretrained(tmp_path / "q", safe_serialization=True)
    ck = load_checkpoint(tmp_path / "q")
    prefixes = torchao_layers(ck.quant_config)
    assert len(prefixes) == 7  # q, k, v, o, gate, up, down
    params = dict(model.named_parameters())
    for prefix in prefixes:
        layer = read_torchao(ck.tensors, prefix, ck.quant_config)
        assert layer.variant == variant
        _assert_exact(layer, params[f"{prefix}.weight"])
    dense = read_torchao(ck.tensors, "model.norm", ck.quant_config)
    assert dense.variant == "dense" and torch.equal(dense.fmt, params["model.norm.weight"])
