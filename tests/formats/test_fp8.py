"""E4M3 saturating cast and the FP8 format at all four granularities."""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from lowbit.formats import E4M3_MAX, FP8, e4m3_saturate, fp8_scale_from_amax
from tests.formats._ref import bits32, ceil_log2, ml_e4m3_bytes

ALL = torch.arange(256, dtype=torch.uint8)
FINITE = (ALL & 0x7F) != 0x7F


def test_all_256_e4m3_bytes_decode_identically_in_torch_and_ml_dtypes():
    th = ALL.view(torch.float8_e4m3fn).float()
    ml = torch.from_numpy(ALL.numpy().view(ml_dtypes.float8_e4m3fn).astype(np.float32))
    assert torch.equal(bits32(th[FINITE]), bits32(ml[FINITE]))
    assert torch.isnan(th[~FINITE]).all() and torch.isnan(ml[~FINITE]).all()
    assert th[FINITE].abs().max().item() == E4M3_MAX


def test_saturate_reencodes_every_finite_byte():
    vals = ALL.view(torch.float8_e4m3fn).float()
    out = e4m3_saturate(vals).view(torch.uint8)
    assert torch.equal(out[FINITE], ALL[FINITE])
    assert torch.isnan(e4m3_saturate(vals[~FINITE]).float()).all()


def test_saturate_matches_ml_dtypes_on_random_values_and_all_midpoints():
    g = torch.Generator().manual_seed(5)
    x = torch.exp2(torch.empty(20000).uniform_(-12, 8.8, generator=g)) * torch.where(torch.rand(20000, generator=g) < 0.5, -1.0, 1.0)
    pos = ALL[:0x7F].view(torch.float8_e4m3fn).float()  # 0 .. 448 ascending
    mids = (pos[1:] + pos[:-1]) / 2  # every RNE tie
    x = torch.cat([x, mids, -mids, torch.tensor([1e-30, -1e-30])])
    ref = ml_e4m3_bytes(x.clamp(-E4M3_MAX, E4M3_MAX))
    assert torch.equal(e4m3_saturate(x).view(torch.uint8), ref)


def test_saturation_and_nan():
    x = torch.tensor([448.0, 449.0, 464.0, 1e6, float("inf"), -1e6, float("-inf"), float("nan")])
    out = e4m3_saturate(x)
    assert out.view(torch.uint8)[:7].tolist() == [0x7E, 0x7E, 0x7E, 0x7E, 0x7E, 0xFE, 0xFE]
    assert torch.isnan(out[7].float())


def test_scale_from_amax_rules():
    amax = torch.tensor([0.0, 1e-6, 1e-4, 1.0, 448.0, 3.0e5])
    assert torch.equal(fp8_scale_from_amax(amax), amax.clamp_min(1e-4) / 448.0)
    p2 = fp8_scale_from_amax(amax, "ue8m0").tolist()
    for a, s in zip(amax.tolist(), p2):
        t = torch.tensor(max(a, 1e-4), dtype=torch.float32) * torch.tensor(1 / 448, dtype=torch.float32)
        assert s == math.ldexp(1.0, ceil_log2(t.item()))
    with pytest.raises(ValueError, match="scale_fmt"):
        fp8_scale_from_amax(amax, "e4m3")


def _blocks_amax(w, n_bs, k_bs):
    n, k = w.shape
    out = np.zeros((math.ceil(n / n_bs), math.ceil(k / k_bs)))
    for i in range(out.shape[0]):
        for j in range(out.shape[1]):
            out[i, j] = np.abs(w[i * n_bs:(i + 1) * n_bs, j * k_bs:(j + 1) * k_bs]).max()
    return out


def _ref_scale(amax: np.ndarray, scale_fmt):
    a = torch.from_numpy(amax).float().clamp_min(1e-4)
    if scale_fmt is None:
        return a / 448.0
    t = a * torch.tensor(1 / 448, dtype=torch.float32)
    return torch.tensor([math.ldexp(1.0, ceil_log2(v)) for v in t.flatten().tolist()]).view(t.shape)


@pytest.mark.parametrize("scale_fmt", [None, "ue8m0"])
@pytest.mark.parametrize("granularity,shape", [("tensor", (7, 40)), ("row", (9, 33)), ("block", (130, 200)), ("group", (3, 5, 256))])
def test_quantize_each_granularity_against_independent_reference(granularity, shape, scale_fmt):
    g = torch.Generator().manual_seed(11)
    w = torch.randn(shape, generator=g) * torch.exp2(torch.randint(-6, 6, shape, generator=g).float())
    q = FP8.quantize(w, granularity, block_size=128, scale_fmt=scale_fmt)
    wn = w.double().numpy()
    if granularity == "tensor":
        amax, expand = np.array(np.abs(wn).max()), lambda s: s.expand(shape)
    elif granularity == "row":
        amax, expand = np.abs(wn).max(1, keepdims=True), lambda s: s.expand(shape)
    elif granularity == "block":
        amax = _blocks_amax(wn, 128, 128)
        expand = lambda s: s.repeat_interleave(128, 0).repeat_interleave(128, 1)[: shape[0], : shape[1]]
    else:
        amax = np.abs(wn.reshape(3, 5, 2, 128)).max(-1)
        expand = lambda s: s.repeat_interleave(128, -1)
    s = _ref_scale(amax, scale_fmt)
    assert q.scale.shape == s.shape and torch.equal(q.scale, s)
    ref = ml_e4m3_bytes((w / expand(s)).clamp(-448, 448))
    assert torch.equal(q.data.view(torch.uint8), ref)
    deq = q.dequantize(torch.float64)
    assert torch.equal(deq, (q.data.double() * expand(s).double()).float().double())
    if scale_fmt == "ue8m0":
        assert (q.data.float().abs() <= 448).all()


def test_block_scale_is_not_transposed():
    w = torch.ones(256, 384)
    w[:128, 128:256] *= 8.0  # tile (0, 1) only
    q = FP8.quantize(w, "block")
    assert q.scale.shape == (2, 3)
    big = q.scale.argmax()
    assert divmod(big.item(), 3) == (0, 1)


@given(
    n=st.integers(1, 40), k=st.integers(1, 40), seed=st.integers(0, 2**31 - 1),
    granularity=st.sampled_from(["tensor", "row", "block"]), scale_fmt=st.sampled_from([None, "ue8m0"]),
)
def test_quantize_dequantize_quantize_is_stable(n, k, seed, granularity, scale_fmt):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=g) * 3
    q1 = FP8.quantize(w, granularity, block_size=16, scale_fmt=scale_fmt)
    d1 = q1.dequantize()
    q2 = FP8.quantize(d1, granularity, block_size=16, scale_fmt=scale_fmt)
    if scale_fmt == "ue8m0":
        assert torch.equal(q2.dequantize(), d1)  # power-of-two scales: values reproduced exactly
    else:
        # fp32 scales are recomputed from the dequantized amax: same codes, scale within an ulp
        assert torch.equal(q2.data.view(torch.uint8), q1.data.view(torch.uint8))
        assert torch.allclose(q2.scale, q1.scale, rtol=2.0**-22, atol=0)


def test_bad_arguments_raise_value_error():
    w = torch.randn(4, 256)
    with pytest.raises(ValueError, match="granularity"):
        FP8.quantize(w, "column")
    with pytest.raises(ValueError, match="scale_fmt"):
        FP8.quantize(w, "row", scale_fmt="e8m0")
    with pytest.raises(ValueError, match="multiple of block_size"):
        FP8.quantize(torch.randn(4, 100), "group", block_size=128)
    with pytest.raises(ValueError, match="2-D"):
        FP8.quantize(torch.randn(2, 3, 4), "row")
    with pytest.raises(ValueError, match="floating"):
        FP8.quantize(torch.ones(4, 4, dtype=torch.int32))
    with pytest.raises(ValueError, match="block_size"):
        FP8.quantize(w, "block", block_size=0)
    q = FP8.quantize(w, "row")
    with pytest.raises(ValueError, match="scale has shape"):
        FP8(q.data, q.scale.T.contiguous(), "row")
    with pytest.raises(ValueError, match="dtype"):
        FP8(q.data.float(), q.scale, "row")
    with pytest.raises(ValueError, match="dtype"):
        FP8(q.data, q.scale.half(), "row")


@pytest.mark.parametrize("granularity", ["tensor", "row", "block", "group"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_input_refused_naming_where(granularity, bad):
    w = torch.randn(4, 64)
    w[3, 17] = bad
    if granularity == "group":  # activations: the act_quant NaN policy, confined to the group
        q = FP8.quantize(w, granularity, 32)
        assert q.dequantize()[3, :32].isnan().all() and q.dequantize()[3, 32:].isfinite().all()
        assert q.dequantize()[:3].isfinite().all()
        return
    with pytest.raises(ValueError, match=r"non-finite.*\(3, 17\)"):
        FP8.quantize(w, granularity, 32)


def test_hostile_arguments_are_value_errors():
    w = torch.randn(4, 64)
    with pytest.raises(ValueError, match="block_size"):
        FP8.quantize(w, "group", 32.0)  # was a TypeError
    with pytest.raises(ValueError, match="block_size"):
        FP8.quantize(w, "block", True)
    for g in ("row", "tensor", "block"):
        for shape in ((0, 64), (4, 0)):  # were RuntimeError / IndexError
            with pytest.raises(ValueError, match="non-empty"):
                FP8.quantize(torch.zeros(shape), g)
    empty = FP8.quantize(torch.zeros(0, 64), "group", 32)  # an empty batch of activations: empty result
    assert empty.data.shape == (0, 64) and empty.scale.shape == (0, 2)
    q = FP8.quantize(w, "row")
    with pytest.raises(ValueError, match="scale_fmt"):
        FP8(q.data, q.scale, "row", 128, "foo")  # the dataclass accepted any scale_fmt
    with pytest.raises(ValueError, match="scale_fmt"):
        FP8.quantize(w, "row", scale_fmt="foo")
