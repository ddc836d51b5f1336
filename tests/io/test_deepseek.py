"""DeepSeek FP8 block (weight_scale_inv / scale, fp32 or e8m0) and FP4 experts (MXFP4)."""
from __future__ import annotations

import pytest
import torch

from lowbit.formats import FP8, MXFP4
from lowbit.io import read_fp4_experts, read_fp8_block, read_layer, write_fp4_experts, write_fp8_block, write_layer
from tests.io._util import assert_same_bytes

P = "model.layers.3.mlp.experts.7.up_proj"


@pytest.mark.parametrize("scale_name", ["weight_scale_inv", "scale"])
@pytest.mark.parametrize("scale_dtype", [torch.float32, torch.float8_e8m0fnu])
def test_fp8_block_roundtrip(scale_name, scale_dtype):
    q = FP8.quantize(torch.randn(200, 300), "block", scale_fmt="ue8m0" if scale_dtype != torch.float32 else None)
    sd = write_fp8_block(q, P, scale_name=scale_name, scale_dtype=scale_dtype)
    assert sd[f"{P}.{scale_name}"].shape == (2, 3) and sd[f"{P}.{scale_name}"].dtype == scale_dtype
    back = read_fp8_block(sd, P)
    assert back.granularity == "block" and torch.equal(back.dequantize(), q.dequantize())
    assert back.scale_fmt == ("ue8m0" if scale_dtype != torch.float32 else None)
    assert_same_bytes(write_layer(read_layer(sd, P), P), sd)


def test_e8m0_scales_every_byte_roundtrip_including_extremes():
    e = torch.arange(6, dtype=torch.uint8).view(2, 3)
    e[0, 0], e[1, 2] = 0, 254  # 2^-127 (an fp32 subnormal) and 2^127
    sd = {f"{P}.weight": torch.zeros(200, 300, dtype=torch.float8_e4m3fn), f"{P}.scale": e.view(torch.float8_e8m0fnu)}
    fmt = read_fp8_block(sd, P)
    assert fmt.scale[0, 0].item() == 2.0**-127 and fmt.scale[1, 2].item() == 2.0**127
    assert_same_bytes(write_fp8_block(fmt, P, scale_name="scale", scale_dtype=torch.float8_e8m0fnu), sd)


def test_fp8_block_scale_applies_per_tile_not_transposed():
    w = torch.ones(256, 128, dtype=torch.float8_e4m3fn)
    s = torch.tensor([[2.0], [3.0]])
    fmt = read_fp8_block({f"{P}.weight": w, f"{P}.weight_scale_inv": s}, P)
    d = fmt.dequantize()
    assert d[127, 0].item() == 2.0 and d[128, 0].item() == 3.0


def test_fp8_block_rejects():
    w = torch.zeros(200, 300, dtype=torch.float8_e4m3fn)
    with pytest.raises(ValueError, match="up_proj.weight_scale_inv' has shape"):
        read_fp8_block({f"{P}.weight": w, f"{P}.weight_scale_inv": torch.ones(3, 2)}, P)
    with pytest.raises(ValueError, match="has dtype"):
        read_fp8_block({f"{P}.weight": w, f"{P}.scale": torch.ones(2, 3, dtype=torch.bfloat16)}, P)
    with pytest.raises(ValueError, match="several"):
        read_fp8_block({f"{P}.weight": w, f"{P}.scale": torch.ones(2, 3), f"{P}.weight_scale_inv": torch.ones(2, 3)}, P)
    with pytest.raises(ValueError, match="none of"):
        read_fp8_block({f"{P}.weight": w}, P)
    q = FP8.quantize(torch.randn(200, 300), "block")  # fp32 scales, not powers of two
    with pytest.raises(ValueError, match="powers of two"):
        write_fp8_block(q, P, scale_dtype=torch.float8_e8m0fnu)
    with pytest.raises(ValueError, match="128x128-block"):
        write_fp8_block(FP8.quantize(torch.randn(200, 300), "block", block_size=64), P)


@pytest.mark.parametrize("wdtype", [torch.int8, torch.uint8, torch.float4_e2m1fn_x2])
@pytest.mark.parametrize("sdtype", [torch.float8_e8m0fnu, torch.uint8])
def test_fp4_experts_roundtrip(wdtype, sdtype):
    q = MXFP4.quantize(torch.randn(6, 64))
    sd = write_fp4_experts(q, P, weight_dtype=wdtype, scale_dtype=sdtype)
    assert sd[f"{P}.weight"].dtype == wdtype and sd[f"{P}.scale"].dtype == sdtype
    back = read_fp4_experts(sd, P)
    assert torch.equal(back.packed, q.packed) and torch.equal(back.scale, q.scale)
    layer = read_layer(sd, P)
    assert layer.variant == "mxfp4-deepseek"
    assert_same_bytes(write_layer(layer, P), sd)


def test_fp4_experts_values_pinned():
    w = torch.zeros(1, 16, dtype=torch.int8)
    w[0, 0] = 0x31
    s = torch.tensor([[128]], dtype=torch.uint8).view(torch.float8_e8m0fnu)  # 2^1
    d = read_fp4_experts({f"{P}.weight": w, f"{P}.scale": s}, P).dequantize()
    assert d[0, :3].tolist() == [1.0, 3.0, 0.0]
    w[0, 0] = -0x10 + 0x0F  # int8 0xFF: both nibbles -6
    d = read_fp4_experts({f"{P}.weight": w, f"{P}.weight_scale_inv": s}, P).dequantize()
    assert d[0, :2].tolist() == [-12.0, -12.0]


def test_fp4_experts_rejects():
    w = torch.zeros(4, 16, dtype=torch.int8)
    with pytest.raises(ValueError, match="up_proj.scale' has shape"):
        read_fp4_experts({f"{P}.weight": w, f"{P}.scale": torch.zeros(1, 4, dtype=torch.float8_e8m0fnu)}, P)
    with pytest.raises(ValueError, match="up_proj.weight' has dtype"):
        read_fp4_experts({f"{P}.weight": w.float(), f"{P}.scale": torch.zeros(4, 1, dtype=torch.uint8)}, P)
    with pytest.raises(ValueError, match="multiple of 32"):
        read_fp4_experts({f"{P}.weight": torch.zeros(4, 8, dtype=torch.int8), f"{P}.scale": torch.zeros(4, 0, dtype=torch.uint8)}, P)
    q = MXFP4.quantize(torch.randn(2, 32))
    with pytest.raises(ValueError, match="weight_dtype"):
        write_fp4_experts(q, P, weight_dtype=torch.float32)
    with pytest.raises(ValueError, match="scale_name"):
        write_fp4_experts(q, P, scale_name="weight_scale")
