"""MXFP4: OCP floor vs ceil scale choice against exact fp64 log2, dequant from stored bits."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from lowbit.formats import MXFP4, mx_scale_exponent
from tests.formats._ref import ceil_log2, e2m1_decode_ref, floor_log2, ml_e2m1_codes


def _ref_exponent(amax: float, rounding: str) -> int:
    if amax == 0.0 or amax < 2.0**-126 and rounding == "floor":
        return 0
    if rounding == "floor":
        return min(max(floor_log2(amax) - 2 + 127, 0), 254)
    t = (torch.tensor(amax, dtype=torch.float32) * torch.tensor(1 / 6, dtype=torch.float32)).item()
    if t == 0.0:
        return 0
    return max(ceil_log2(t), -126) + 127


@pytest.mark.parametrize("rounding", ["floor", "ceil"])
def test_scale_exponent_vs_fp64_reference(rounding):
    g = torch.Generator().manual_seed(2)
    amax = torch.exp2(torch.empty(5000, dtype=torch.float64).uniform_(-140, 120, generator=g)).float()
    pows = torch.tensor([2.0**e for e in range(-126, 120)])
    amax = torch.cat([amax, pows, pows * 6, pows * 1.5, torch.tensor([0.0, 1e-40])])
    got = mx_scale_exponent(amax, rounding).tolist()
    assert got == [_ref_exponent(a, rounding) for a in amax.tolist()]


def test_floor_vs_ceil_pinned():
    # amax 7: floor -> e=2-2=0 (scale 1, 7 saturates to 6); ceil -> ceil(log2(7/6)) = 1 (scale 2, 3.5 -> 4)
    w = torch.zeros(1, 32)
    w[0, 0] = 7.0
    w[0, 1] = 1.0
    f, c = MXFP4.quantize(w, "floor"), MXFP4.quantize(w, "ceil")
    assert f.scale.item() == 127 and c.scale.item() == 128
    assert f.dequantize()[0, :2].tolist() == [6.0, 1.0]
    assert c.dequantize()[0, :2].tolist() == [8.0, 1.0]  # 1/2 = 0.5 is a code
    w[0, 0] = 6.0  # both rules agree where the max is exactly representable
    assert MXFP4.quantize(w, "floor").scale.item() == MXFP4.quantize(w, "ceil").scale.item() == 127


def test_ceil_never_saturates_floor_can():
    g = torch.Generator().manual_seed(4)
    w = torch.randn(16, 256, generator=g) * 5
    wb = w.view(16, 8, 32)
    for rounding, bound in (("ceil", 6.0), ("floor", 8.0)):
        q = MXFP4.quantize(w, rounding)
        s = torch.exp2(q.scale.double() - 127)
        ratio = wb.abs().amax(-1).double() / s
        assert (ratio <= bound).all()
    assert (ratio > 6).any()  # floor lets the block max exceed 6 (it saturates)


def test_all_zero_block_and_nan_scale():
    w = torch.randn(2, 64)
    w[1, 32:] = 0.0
    q = MXFP4.quantize(w)
    assert q.scale[1, 1].item() == 0 and (q.packed[1, 16:] == 0).all()
    assert torch.equal(q.dequantize()[1, 32:], torch.zeros(32))
    bad = MXFP4(q.packed, torch.full_like(q.scale, 0xFF))
    assert torch.isnan(bad.dequantize()).all()
    assert mx_scale_exponent(torch.tensor([float("inf"), float("nan")])).tolist() == [255, 255]


@pytest.mark.parametrize("rounding", ["floor", "ceil"])
def test_quantize_codes_and_dequant_from_bits(rounding):
    g = torch.Generator().manual_seed(6)
    w = torch.randn(5, 96, generator=g) * torch.exp2(torch.randint(-10, 10, (5, 3, 1), generator=g).float()).repeat_interleave(32, -1).view(5, 96)
    q = MXFP4.quantize(w, rounding)
    e = [[_ref_exponent(a, rounding) for a in row] for row in w.view(5, 3, 32).abs().amax(-1).tolist()]
    assert q.scale.tolist() == e
    scale = torch.tensor([[math.ldexp(1.0, x - 127) for x in row] for row in e])
    y = w / scale.repeat_interleave(32, -1)
    codes = ml_e2m1_codes(y)
    packed = codes[:, 0::2] | (codes[:, 1::2] << 4)
    assert torch.equal(q.packed, packed)
    ref = e2m1_decode_ref(q.packed) * scale.double().repeat_interleave(32, -1).numpy()
    assert np.array_equal(q.dequantize(torch.float64).numpy(), ref)


@given(n=st.integers(1, 5), kb=st.integers(1, 4), seed=st.integers(0, 2**31 - 1), rounding=st.sampled_from(["floor", "ceil"]),
       exp=st.integers(-20, 20))
def test_quantize_dequantize_quantize_idempotent(n, kb, seed, rounding, exp):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n, 32 * kb, generator=g) * 2.0**exp
    d1 = MXFP4.quantize(w, rounding).dequantize()
    q2 = MXFP4.quantize(d1, rounding)
    assert torch.equal(q2.dequantize(), d1)


def test_bad_arguments_raise_value_error():
    w = torch.randn(2, 128)
    with pytest.raises(ValueError, match="rounding"):
        MXFP4.quantize(w, "nearest")
    with pytest.raises(ValueError, match="rounding"):
        mx_scale_exponent(torch.ones(2), "up")
    with pytest.raises(ValueError, match="K % 32"):
        MXFP4.quantize(torch.randn(2, 48))
    with pytest.raises(ValueError, match="group size"):
        MXFP4.quantize(w, group_size=16)
    with pytest.raises(ValueError, match="dims"):
        MXFP4.quantize(torch.randn(64))
    q = MXFP4.quantize(w)
    with pytest.raises(ValueError, match="scale has shape"):
        MXFP4(q.packed, q.scale.T.contiguous())
    with pytest.raises(ValueError, match="dtype"):
        MXFP4(q.packed, q.scale.view(torch.int8))
    assert q.nbytes == 2 * 64 + 2 * 4


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_input_refused_naming_where(bad):
    w = torch.randn(4, 64)
    w[1, 33] = bad
    with pytest.raises(ValueError, match=r"non-finite.*\(1, 33\)"):
        MXFP4.quantize(w)


@pytest.mark.parametrize("shape", [(0, 64), (4, 0)])
def test_empty_weight_gives_empty_result(shape):
    q = MXFP4.quantize(torch.zeros(shape))
    assert q.shape == shape and q.dequantize().shape == shape
