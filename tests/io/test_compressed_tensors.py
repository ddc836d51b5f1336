"""compressed-tensors FP8 per-channel and NVFP4 (inverse global scale)."""
from __future__ import annotations

import pytest
import torch

from lowbit.formats import FP8, NVFP4
from lowbit.io import read_fp8_channel, read_layer, read_nvfp4_ct, write_fp8_channel, write_layer, write_nvfp4_ct
from tests.io._util import assert_same_bytes

P = "model.layers.1.self_attn.o_proj"


def test_fp8_channel_roundtrip_and_values():
    q = FP8.quantize(torch.randn(7, 40), "row")
    sd = write_fp8_channel(q, P, input_scale=torch.tensor(0.1))
    assert sd[f"{P}.weight_scale"].shape == (7, 1) and sd[f"{P}.weight"].dtype == torch.float8_e4m3fn
    back = read_fp8_channel(sd, P)
    assert back.granularity == "row" and torch.equal(back.dequantize(), q.dequantize())
    assert_same_bytes(write_fp8_channel(back, P, input_scale=sd[f"{P}.input_scale"]), sd)


@pytest.mark.parametrize("bad,match", [
    ({"weight_scale": torch.ones(1, 7)}, "weight_scale' has shape"),
    ({"weight_scale": torch.ones(7, 1, dtype=torch.float64)}, "weight_scale' has dtype"),
    ({"weight": torch.ones(7, 40)}, "weight' has dtype"),
])
def test_fp8_channel_rejects(bad, match):
    sd = write_fp8_channel(FP8.quantize(torch.randn(7, 40), "row"), P)
    sd.update({f"{P}.{k}": v for k, v in bad.items()})
    with pytest.raises(ValueError, match=match):
        read_fp8_channel(sd, P)
    with pytest.raises(ValueError, match="per-row FP8"):
        write_fp8_channel(FP8.quantize(torch.randn(7, 40), "tensor"), P)


def _ct_nvfp4(inv: float, shape=(1,)):
    q = NVFP4.quantize(torch.randn(4, 32))
    return {
        f"{P}.weight_packed": q.packed,
        f"{P}.weight_scale": q.scale,
        f"{P}.weight_global_scale": torch.tensor(inv, dtype=torch.float32).reshape(shape),
        f"{P}.input_global_scale": torch.tensor(300.0, dtype=torch.float32).reshape(shape),
    }


def test_nvfp4_global_scale_is_normalised_to_the_multiplier():
    sd = _ct_nvfp4(448.0 * 6 / 3.0)  # an inverse: 1/global_scale
    fmt = read_nvfp4_ct(sd, P)
    assert fmt.global_scale.item() == pytest.approx(3.0 / (448.0 * 6), rel=1e-7)
    assert fmt.global_scale.view(torch.int32).item() == (1.0 / sd[f"{P}.weight_global_scale"]).reshape(()).view(torch.int32).item()
    ref = NVFP4(sd[f"{P}.weight_packed"], sd[f"{P}.weight_scale"], fmt.global_scale)
    assert torch.equal(fmt.dequantize(), ref.dequantize())
    layer = read_layer(sd, P)
    assert layer.variant == "nvfp4-compressed-tensors" and "inverse" in layer.global_scale_source


def test_nvfp4_roundtrip_bit_exact_even_when_reciprocal_does_not_roundtrip():
    # find an fp32 x with f32(1/f32(1/x)) != x: the writer must keep the stored inverse
    x = torch.rand(1000) * 1000 + 1
    bad = x[(1.0 / (1.0 / x)) != x][0].item()
    sd = _ct_nvfp4(bad)
    layer = read_layer(sd, P)
    assert_same_bytes(write_layer(layer, P), sd)
    recomputed = write_nvfp4_ct(layer.fmt, P)[f"{P}.weight_global_scale"]
    assert recomputed.item() != bad  # why the stored inverse is kept
    with pytest.raises(ValueError, match="not the stored inverse"):
        write_nvfp4_ct(layer.fmt, P, weight_global_scale=torch.tensor([bad * 2]))


def test_nvfp4_ct_rejects():
    sd = _ct_nvfp4(100.0)
    sd[f"{P}.weight_global_scale"] = torch.tensor([0.0])
    with pytest.raises(ValueError, match="finite and positive"):
        read_nvfp4_ct(sd, P)
    sd = _ct_nvfp4(100.0)
    del sd[f"{P}.weight_global_scale"]
    with pytest.raises(ValueError, match="weight_global_scale"):
        read_nvfp4_ct(sd, P)
    sd = _ct_nvfp4(100.0)
    sd[f"{P}.weight_scale"] = sd[f"{P}.weight_scale"][:, :1].contiguous()
    with pytest.raises(ValueError, match="o_proj.weight_scale' has shape"):
        read_nvfp4_ct(sd, P)
    with pytest.raises(ValueError, match="NVFP4"):
        write_nvfp4_ct(FP8.quantize(torch.randn(2, 16)), P)


# --------------------------------------------------------------------------------------------
# Checkpoints written the way compressed-tensors / llm-compressor write them. The real libraries
# are not installed here; the conventions assumed, per linear <prefix> (format "float-quantized",
# num_bits 8, type float, symmetric):
#   FP8_DYNAMIC (strategy channel, dynamic activations): weight e4m3 [N, K], weight_scale [N, 1] in
#     the model's dtype (bf16 for a bf16 model), no input_scale;
#   FP8 (strategy tensor, static activations): weight e4m3 [N, K], weight_scale [1] (older
#     versions: a 0-d scalar), input_scale [1];
#   FP8_BLOCK (strategy block, block_structure [128, 128]): weight e4m3 [N, K], weight_scale
#     [ceil(N/128), ceil(K/128)] in the model's dtype, the last blocks partial;
#   MXFP4 and integer pack-quantized: see test_ct_packed.py.
# The oracle dequantizes in fp64 with explicit block loops, apart from lowbit's FP8.dequantize.


def _oracle(weight: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    n, k = weight.shape
    w = weight.to(torch.float64)
    s = scale.to(torch.float64)
    out = torch.empty(n, k, dtype=torch.float64)
    if s.numel() == 1:
        return w * s.reshape(())
    if tuple(s.shape) == (n, 1):
        return w * s
    for i in range(s.shape[0]):
        for j in range(s.shape[1]):
            out[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128] = w[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128] * s[i, j]
    return out


def _e4m3(n, k, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, k, generator=g) * 100).clamp(-448, 448).to(torch.float8_e4m3fn)


def _scales(shape, dtype, seed=1):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(shape, generator=g) * 0.01 + 1e-4).to(dtype)


CT_CASES = {
    # name: (N, K, scale shape, scale dtype, input_scale, variant, granularity)
    "fp8-dynamic-bf16": (40, 96, (40, 1), torch.bfloat16, None, "fp8-row-compressed-tensors", "row"),
    "fp8-dynamic-fp16": (40, 96, (40, 1), torch.float16, None, "fp8-row-compressed-tensors", "row"),
    "fp8-dynamic-fp32": (40, 96, (40, 1), torch.float32, None, "fp8-row-compressed-tensors", "row"),
    "fp8-tensor": (40, 96, (1,), torch.float32, (1,), "fp8-tensor-compressed-tensors", "tensor"),
    "fp8-tensor-0d-bf16": (40, 96, (), torch.bfloat16, (), "fp8-tensor-compressed-tensors", "tensor"),
    "fp8-block-bf16": (300, 200, (3, 2), torch.bfloat16, None, "fp8-block-compressed-tensors", "block"),
    "fp8-block-fp32": (256, 384, (2, 3), torch.float32, None, "fp8-block-compressed-tensors", "block"),
}


@pytest.mark.parametrize("case", sorted(CT_CASES))
def test_ct_fp8_layouts_read_exactly_and_write_back_bit_exact(case):
    from lowbit.io import read_fp8_ct

    n, k, sshape, sdtype, ishape, variant, gran = CT_CASES[case]
    sd = {f"{P}.weight": _e4m3(n, k), f"{P}.weight_scale": _scales(sshape, sdtype)}
    if ishape is not None:
        sd[f"{P}.input_scale"] = torch.tensor(0.5, dtype=torch.float32).reshape(ishape)
    layer = read_layer(sd, P)
    assert layer.variant == variant and layer.fmt.granularity == gran
    assert layer.fmt.scale.dtype == torch.float32
    # exact: fp32 dequantize of e4m3 x (bf16/fp16/fp32 scale) is one rounding of the fp64 product
    # (e4m3 has 4 significant bits, bf16 8, fp16 11, fp32 24: the product needs <= 28 bits, so it is
    # exact in fp64 and its fp32 rounding is what lowbit must return, bit for bit)
    want = _oracle(sd[f"{P}.weight"], sd[f"{P}.weight_scale"]).to(torch.float32)
    assert torch.equal(layer.fmt.dequantize(torch.float32), want)
    assert torch.equal(read_fp8_ct(sd, P).dequantize(torch.float32), want)
    assert_same_bytes(write_layer(layer, P), sd)


def test_ct_fp8_dynamic_bf16_reads_like_its_fp32_cast():
    sd = {f"{P}.weight": _e4m3(16, 64), f"{P}.weight_scale": _scales((16, 1), torch.bfloat16)}
    as32 = dict(sd, **{f"{P}.weight_scale": sd[f"{P}.weight_scale"].float()})
    assert torch.equal(read_fp8_channel(sd, P).dequantize(), read_fp8_channel(as32, P).dequantize())


def test_ct_fp8_scale_dtype_write_refuses_inexact_scales():
    from lowbit.io import write_fp8_ct

    q = FP8.quantize(torch.randn(8, 32), "row")  # fp32 scales, not bf16-exact
    with pytest.raises(ValueError, match="not all exactly representable"):
        write_fp8_ct(q, P, scale_dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="scale_dtype"):
        write_fp8_ct(q, P, scale_dtype=torch.float64)
    with pytest.raises(ValueError, match="128x128"):
        write_fp8_ct(FP8.quantize(torch.randn(8, 64), "block", block_size=32), P)


def test_ct_fp8_unknown_scale_shape_is_refused_with_the_layouts():
    sd = {f"{P}.weight": _e4m3(300, 200), f"{P}.weight_scale": _scales((5, 4), torch.float32)}  # 64x64 blocks
    with pytest.raises(ValueError, match=r"\(5, 4\).*strategy tensor.*channel: \(300, 1\).*block 128x128: \(3, 2\)"):
        read_layer(sd, P)
