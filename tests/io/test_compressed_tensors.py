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
    ({"weight_scale": torch.ones(7, 1, dtype=torch.bfloat16)}, "weight_scale' has dtype"),
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
