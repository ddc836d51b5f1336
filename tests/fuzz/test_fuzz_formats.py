"""Fuzz: quantize -> dequantize of INTx / NVFP4 / MXFP4 / FP8 on hostile shapes and magnitudes.

Shapes include N = 1, odd K and K not a multiple of the group; inputs bf16 / fp16 / fp32 with
magnitudes from fp32 subnormals to 3e38 (so casts overflow to inf) and injected NaN / inf. Every
call either raises ``ValueError`` (non-finite input, a shape the format cannot hold, an INTx
group whose scale does not fit fp16) or returns finite values that meet the format's documented
rule / error bound, checked against an fp64 oracle written here (for FP8 / NVFP4 / MXFP4 the
codes and scales are compared bit-exact with ml_dtypes casts, as in tests/formats).
"""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lowbit.formats import FP8, INTx, MXFP4, NVFP4
from tests.formats._ref import e2m1_decode_ref, floor_log2, ml_e2m1_codes, ml_e4m3_bytes
from tests.formats.test_nvfp4 import modelopt_reference

DTYPES = [torch.float32, torch.bfloat16, torch.float16]


@st.composite
def _inputs(draw, k_unit: int):
    """(w in its dtype, fp64 copy of what was stored, finite?) with N in 1..4, K around multiples
    of ``k_unit`` (sometimes off by one: odd K, K not a multiple of the group)."""
    n = draw(st.integers(1, 4))
    k = k_unit * draw(st.integers(1, 4)) + draw(st.sampled_from([0, 0, 0, 1, -1, 16]))
    k = max(k, 1)
    dtype = draw(st.sampled_from(DTYPES))
    lo = draw(st.floats(-46.0, 38.5))
    hi = draw(st.floats(lo, 38.5))
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    mag = 10.0 ** (lo + (hi - lo) * torch.rand(n, k, generator=g, dtype=torch.float64))
    sign = torch.where(torch.rand(n, k, generator=g) < 0.5, -1.0, 1.0).double()
    w64 = mag * sign
    w64[torch.rand(n, k, generator=g) < draw(st.sampled_from([0.0, 0.3]))] = 0.0
    special = draw(st.sampled_from([None, None, None, float("nan"), float("inf"), float("-inf")]))
    if special is not None:
        w64[n - 1, k // 2] = special
    w = w64.float().to(dtype)  # may overflow to inf or flush to 0 / subnormal in the dtype
    return w, bool(torch.isfinite(w).all())


def _halfstep_e2m1(v: torch.Tensor) -> torch.Tensor:
    """Half the E2M1 grid spacing around |v| (grid 0, .5, 1, 1.5, 2, 3, 4, 6)."""
    a = v.abs()
    return torch.where(a < 2, 0.25, torch.where(a < 4, 0.5, 1.0)).double()


@settings(max_examples=150, deadline=None)
@given(data=_inputs(16), bits=st.sampled_from([2, 4, 8]), group=st.sampled_from([16, 32, 64]))
def test_fuzz_intx(data, bits, group):
    w, finite = data
    n, k = w.shape
    qmax = (1 << bits) - 1
    w64 = w.double()
    kp = -(-k // ((8 // bits) * group)) * ((8 // bits) * group)
    if k % 16 or not finite:
        with pytest.raises(ValueError):
            INTx.quantize(w, bits=bits, group_size=group)
        return
    padded = torch.zeros(n, kp, dtype=torch.float64)
    padded[:, :k] = w64
    blk = padded.view(n, kp // group, group)
    rng = (blk.amax(-1).clamp_min(0) - blk.amin(-1).clamp_max(0)) / qmax  # fp64 range / qmax
    try:
        q = INTx.quantize(w, bits=bits, group_size=group)
    except ValueError as e:
        # unrepresentable: some group needs a scale above fp16's max (the fp32 evaluation of
        # range / qmax may sit one fp32 ulp either side of 65504: allow 2^-22 relative)
        assert "does not fit fp16" in str(e)
        assert rng.max() > 65504 * (1 - 2**-22)
        return
    assert rng.max() <= 65504 * (1 + 2**-22)
    s = q.scale.double()
    assert torch.isfinite(s).all() and (s > 0).all()
    # s is range / qmax (or the 1e-8 floor) rounded UP to fp16: >= it, and at most one fp16
    # step above (2^-10 relative for normal fp16, 2^-24 absolute in the subnormal range); the
    # 2^-22 terms cover the fp32 evaluation of range / qmax
    want = rng.clamp_min(1e-8)
    assert (s >= want * (1 - 2**-22)).all()
    assert (s <= want * (1 + 2**-10) * (1 + 2**-22) + 2**-24).all()
    deq = q.dequantize(torch.float64)
    assert torch.isfinite(deq).all()
    # the documented bound |w - w~| <= s/2 (codes never clamp); (q - z) s is exact in fp64, and
    # the fp32 rounding of w / s + z adds at most 2^-20 relative (as tests/formats/test_intx.py)
    err = (w64 - deq).abs()
    bound = s.repeat_interleave(group, 1)[:, :k] / 2
    assert (err <= bound * (1 + 2**-20)).all()


@settings(max_examples=150, deadline=None)
@given(data=_inputs(16), explicit_gs=st.sampled_from([None, None, 1.0, 1e-30, 1e30]))
def test_fuzz_nvfp4(data, explicit_gs):
    w, finite = data
    n, k = w.shape
    if k % 16 or not finite:
        with pytest.raises(ValueError):
            NVFP4.quantize(w, global_scale=explicit_gs)
        return
    q = NVFP4.quantize(w, global_scale=explicit_gs)
    deq = q.dequantize(torch.float64)
    gs = float(q.global_scale)
    assert math.isfinite(gs) and gs > 0
    if explicit_gs is None:  # bit-exact against the ModelOpt rule re-implemented in numpy
        packed, scale, ref_gs = modelopt_reference(w.float())
        assert gs == float(ref_gs)
        assert np.array_equal(q.scale.view(torch.uint8).numpy(), scale)
        assert np.array_equal(q.packed.numpy(), packed)
    denom = q.scale.double() * gs  # what the stored scale covers per block
    assert torch.isfinite(denom).all() or explicit_gs is not None
    if not torch.isfinite(denom).all():
        return  # an explicit global scale too large for the weight: scales saturate (finite below)
    dn = denom.repeat_interleave(16, 1)
    v = w.double() / dn
    # E2M1 rounds to the nearest grid point, saturating at 6: error <= half step + excess over 6
    bound = (_halfstep_e2m1(v.clamp(-6, 6)) + (v.abs() - 6).clamp_min(0)) * dn
    assert torch.isfinite(deq).all()
    assert ((w.double() - deq).abs() <= bound * (1 + 2**-20)).all()


@settings(max_examples=150, deadline=None)
@given(data=_inputs(32), rounding=st.sampled_from(["floor", "ceil"]))
def test_fuzz_mxfp4(data, rounding):
    w, finite = data
    n, k = w.shape
    if k % 32 or not finite:
        with pytest.raises(ValueError):
            MXFP4.quantize(w, rounding)
        return
    q = MXFP4.quantize(w, rounding)
    wf = w.float()
    blk = wf.view(n, k // 32, 32)
    amax = blk.abs().amax(-1)
    # scale exponent by the documented rule, from fp64 log2 (frexp), not from exponent bits
    ref_e = torch.zeros_like(amax, dtype=torch.int64)
    for idx, a in np.ndenumerate(amax.double().numpy()):
        if a == 0.0 or (a < 2.0**-126 and rounding == "floor"):
            e = 0
        elif rounding == "floor":
            e = min(max(floor_log2(a) - 2 + 127, 0), 254)
        else:
            t = float(np.float32(a) * np.float32(1 / 6))
            e = 0 if t == 0.0 else max(math.frexp(t)[1] - (1 if math.frexp(t)[0] == 0.5 else 0), -126) + 127
        ref_e[idx] = e
    assert torch.equal(q.scale.long(), ref_e)
    scale = torch.pow(2.0, ref_e.double() - 127)
    v = blk.double() / scale.unsqueeze(-1)
    codes = ml_e2m1_codes(v.float().view(n, k))
    got = torch.from_numpy(e2m1_decode_ref(q.packed)).view(n, k // 32, 32)
    want = torch.from_numpy(e2m1_decode_ref(
        (codes[:, 0::2] | (codes[:, 1::2] << 4)).to(torch.uint8))).view(n, k // 32, 32)
    assert torch.equal(got.abs(), want.abs())  # -0 / +0 aside, the ml_dtypes codes
    deq = q.dequantize(torch.float64).view(n, k // 32, 32)
    assert torch.isfinite(deq).all()
    bound = (_halfstep_e2m1(v.clamp(-6, 6)) + (v.abs() - 6).clamp_min(0)) * scale.unsqueeze(-1)
    assert ((blk.double() - deq).abs() <= bound).all()
    if rounding == "ceil":  # never saturates
        assert (v.abs() <= 6).all()


@settings(max_examples=150, deadline=None)
@given(data=_inputs(32), granularity=st.sampled_from(["tensor", "row", "block", "group"]),
       scale_fmt=st.sampled_from([None, "ue8m0"]), block=st.sampled_from([16, 32, 128]))
def test_fuzz_fp8(data, granularity, scale_fmt, block):
    w, finite = data
    n, k = w.shape
    if granularity == "group" and k % block:
        with pytest.raises(ValueError):
            FP8.quantize(w, granularity, block, scale_fmt)
        return
    if not finite and granularity != "group":
        with pytest.raises(ValueError, match="non-finite"):
            FP8.quantize(w, granularity, block, scale_fmt)
        return
    q = FP8.quantize(w, granularity, block, scale_fmt)
    s = q.expanded_scale().double()
    deq = q.dequantize(torch.float64)
    wd = w.double()
    ok = torch.isfinite(s)  # group: a non-finite group (the act_quant NaN policy) is NaN throughout
    if granularity == "group" and not finite:
        bad_groups = ~torch.isfinite(w.float().view(n, k // block, block)).all(-1)
        assert torch.equal(~ok.view(n, k // block, block).all(-1), bad_groups)
        assert deq[~ok].isnan().all()
    # data: e4m3 (RNE, saturating) of w / s, bit-exact with ml_dtypes
    y = (w.float()[ok] / s.float()[ok]).clamp(-448, 448)
    assert torch.equal(q.data.view(torch.uint8)[ok], ml_e4m3_bytes(y))
    # scale rule: s >= amax / 448 (so nothing saturates by more than fp32 rounding) and, with
    # ue8m0, a power of two; error <= half an e4m3 step: 2^-4 relative for normals, 2^-10 s for
    # the subnormal range (spacing 2^-9 s)
    sf = s[ok]
    if scale_fmt == "ue8m0":
        assert (torch.frexp(sf)[0] == 0.5).all()
    err = (wd[ok] - deq[ok]).abs()
    assert (err <= (wd[ok].abs() * 2**-4 + sf * 2**-10) * (1 + 2**-20)).all()
    assert torch.isfinite(deq[ok]).all()
