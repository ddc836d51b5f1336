"""INTx plane-split: the s/2 error bound, the byte layout pinned by hand, any K % 16 == 0."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from lowbit.formats import INTx, pack_planes, unpack_planes
from lowbit.formats.intx import padded_k


def _codes_loop(packed: torch.Tensor, bits: int) -> np.ndarray:
    """Codes [N, Kp] from bytes by the documented rule: bits [i*b, (i+1)*b) of byte j hold k = i*L + j."""
    p = packed.numpy().astype(np.int64)
    n, length = p.shape
    planes = 8 // bits
    out = np.zeros((n, length * planes), dtype=np.int64)
    for r in range(n):
        for j in range(length):
            for i in range(planes):
                out[r, i * length + j] = (p[r, j] >> (i * bits)) & ((1 << bits) - 1)
    return out


def test_layout_pinned_4bit():
    q = torch.zeros(1, 32, dtype=torch.uint8)  # bits=4, G=16: Kp=32, two planes of L=16
    q[0, 0], q[0, 16], q[0, 5], q[0, 31] = 0x3, 0xA, 0x7, 0xF
    p = pack_planes(q, 4)
    assert p.shape == (1, 16)
    assert p[0, 0].item() == 0xA3  # k=0 low nibble, k=16 high nibble
    assert p[0, 5].item() == 0x07 and p[0, 15].item() == 0xF0


def test_layout_pinned_2bit():
    q = torch.zeros(1, 64, dtype=torch.uint8)  # bits=2, G=16: four planes of L=16
    q[0, 0], q[0, 16], q[0, 32], q[0, 48] = 1, 2, 3, 0
    q[0, 63] = 3
    p = pack_planes(q, 2)
    assert p.shape == (1, 16)
    assert p[0, 0].item() == 0b00_11_10_01  # k=0 -> bits 0-1, k=16 -> 2-3, k=32 -> 4-5, k=48 -> 6-7
    assert p[0, 15].item() == 0b11_00_00_00  # k=63 = 3*16 + 15 -> top bits of byte 15


@pytest.mark.parametrize("bits", [2, 4, 8])
def test_quantized_layout_matches_loop_decoder(bits):
    w = torch.randn(3, 80)
    q = INTx.quantize(w, bits=bits, group_size=16)
    assert np.array_equal(q.codes().numpy(), _codes_loop(q.packed, bits))
    assert torch.equal(unpack_planes(pack_planes(q.codes(), bits), bits), q.codes())


def _dequant_ref(q: INTx) -> np.ndarray:
    codes = _codes_loop(q.packed, q.bits).astype(np.float64)
    s = np.repeat(q.scale.double().numpy(), q.group_size, 1)
    z = np.repeat(q.zero.double().numpy(), q.group_size, 1)
    return ((codes - z) * s)[:, : q.k]


@pytest.mark.parametrize("bits", [2, 4, 8])
@pytest.mark.parametrize("k,group_size", [(16, 16), (48, 32), (80, 64), (576, 64), (144, 128)])
def test_error_bound_any_k_multiple_of_16(bits, k, group_size):
    g = torch.Generator().manual_seed(bits * 1000 + k)
    w = torch.randn(6, k, generator=g) * torch.rand(6, 1, generator=g) * 4
    w[0] = w[0].abs() + 0.5  # all positive: the range must still include 0
    q = INTx.quantize(w, bits=bits, group_size=group_size)
    kp = padded_k(k, bits, group_size)
    assert q.shape == (6, k) and q.padded_k == kp and kp % ((8 // bits) * group_size) == 0
    assert q.packed.shape == (6, kp * bits // 8) and q.scale.shape == q.zero.shape == (6, kp // group_size)
    deq = q.dequantize(torch.float64)
    assert deq.shape == (6, k)
    assert np.allclose(deq.numpy(), _dequant_ref(q), rtol=2**-22, atol=0)  # fp64 from the stored bits
    s = q.scale.double().repeat_interleave(group_size, 1)[:, :k]
    err = (w.double() - _dequant_ref_t(q)).abs()
    # (q - z) * s is exact in fp64, so the bound holds up to the fp32 rounding of w / s
    assert (err <= s / 2 * (1 + 2**-20)).all()
    # padding holds q == z, i.e. exact zeros
    codes = q.codes().long()
    zero = q.zero.long().repeat_interleave(group_size, 1)
    assert torch.equal(codes[:, k:], zero[:, k:])


def _dequant_ref_t(q):
    return torch.from_numpy(_dequant_ref(q))


def test_scale_zero_rule():
    w = torch.cat([torch.linspace(-1.0, 3.0, 16), torch.linspace(0.5, 2.0, 16)]).view(1, 32)
    q = INTx.quantize(w, bits=4, group_size=16)
    # group 0: lo=-1, hi=3, s = fp16_up(4/15), z = round(1/s) = round(3.75) = 4
    s0 = torch.tensor(4 / 15, dtype=torch.float32)
    s0h = s0.half()
    if s0h.float() < s0:
        s0h = torch.nextafter(s0h, torch.tensor(float("inf"), dtype=torch.float16))
    assert q.scale[0, 0].item() == s0h.item() and q.zero[0, 0].item() == 4
    # group 1: all positive -> lo = 0, z = 0
    assert q.zero[0, 1].item() == 0 and q.scale[0, 1].item() >= 2.0 / 15
    assert torch.equal(q.error_bound(), q.scale.float() / 2)


@given(n=st.integers(1, 4), k16=st.integers(1, 12), bits=st.sampled_from([2, 4, 8]), gsel=st.sampled_from([16, 32, 64]),
       seed=st.integers(0, 2**31 - 1))
def test_quantize_dequantize_quantize_stays_within_bound(n, k16, bits, gsel, seed):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n, 16 * k16, generator=g)
    q1 = INTx.quantize(w, bits=bits, group_size=gsel)
    d1 = q1.dequantize()
    q2 = INTx.quantize(d1, bits=bits, group_size=gsel)
    d2 = q2.dequantize()
    s2 = q2.scale.float().repeat_interleave(gsel, 1)[:, : w.shape[1]]
    assert ((d2 - d1).abs() <= s2 / 2 * (1 + 2**-20)).all()
    assert (q2.scale <= q1.scale).all()  # the range of the dequantized values never grows
    q3 = INTx.quantize(d2, bits=bits, group_size=gsel)
    assert ((q3.dequantize() - d2).abs() <= s2 / 2 * (1 + 2**-20)).all()


def test_bad_arguments_raise_value_error():
    w = torch.randn(2, 64)
    with pytest.raises(ValueError, match="bits"):
        INTx.quantize(w, bits=3)
    with pytest.raises(ValueError, match="group_size"):
        INTx.quantize(w, group_size=24)
    with pytest.raises(ValueError, match="group_size"):
        INTx.quantize(w, group_size=0)
    with pytest.raises(ValueError, match="K % 16"):
        INTx.quantize(torch.randn(2, 40))
    with pytest.raises(ValueError, match="dims"):
        INTx.quantize(torch.randn(64))
    with pytest.raises(ValueError, match="floating"):
        INTx.quantize(torch.ones(2, 64, dtype=torch.int32))
    q = INTx.quantize(w, bits=4, group_size=32)
    with pytest.raises(ValueError, match="packed has shape"):
        INTx(q.packed[:, :8].contiguous(), q.scale, q.zero, 4, 32, 64)
    with pytest.raises(ValueError, match="scale/zero"):
        INTx(q.packed, q.scale[:, :1].contiguous(), q.zero, 4, 32, 64)
    with pytest.raises(ValueError, match="dtype"):
        INTx(q.packed, q.scale.float(), q.zero, 4, 32, 64)
    with pytest.raises(ValueError, match="bits"):
        INTx(q.packed, q.scale, q.zero, 3, 32, 64)
    with pytest.raises(ValueError, match="multiple"):
        pack_planes(torch.zeros(1, 6, dtype=torch.uint8), 2)


def test_hostile_arguments_raise_value_error():
    w = torch.randn(2, 64)
    q = INTx.quantize(w, bits=4, group_size=32)
    with pytest.raises(ValueError, match="group_size"):
        INTx(q.packed, q.scale, q.zero, 4, 0, 64)  # was a ZeroDivisionError
    with pytest.raises(ValueError, match="group_size"):
        INTx.quantize(w, group_size=16.0)  # was a TypeError
    with pytest.raises(ValueError, match="group_size"):
        INTx.quantize(w, group_size=True)
    with pytest.raises(ValueError, match="bits"):
        INTx.quantize(w, bits=8.0)
    with pytest.raises(ValueError, match="bits"):
        INTx(q.packed, q.scale, q.zero, 4.0, 32, 64)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_input_refused_naming_where(bad):
    w = torch.randn(3, 64)
    w[2, 37] = bad
    with pytest.raises(ValueError, match=r"non-finite.*\(2, 37\)"):
        INTx.quantize(w, bits=8, group_size=16)


@pytest.mark.parametrize("bits", [2, 4, 8])
def test_scale_overflowing_fp16_refused_naming_row_and_group(bits):
    w = torch.randn(4, 64) * 0.02
    w[3, 40] = 1e8  # range / qmax >= 1e8 / 255 > 65504
    with pytest.raises(ValueError, match=r"row 3, group 2 .*does not fit fp16"):
        INTx.quantize(w, bits=bits, group_size=16)
    # the largest range that fits (65504 * qmax, the rest of the group zero) keeps finite scales
    w[3, 32:48] = 0.0
    w[3, 40] = 65504.0 * ((1 << bits) - 1)
    q = INTx.quantize(w, bits=bits, group_size=16)
    assert torch.isfinite(q.scale.float()).all() and torch.isfinite(q.dequantize()).all()
    # a range that overflows fp32 itself (hi - lo = inf) is refused too, not turned into NaN
    w[3, 40], w[3, 41] = 3e38, -3e38
    with pytest.raises(ValueError, match="row 3, group 2"):
        INTx.quantize(w, bits=bits, group_size=16)


@pytest.mark.parametrize("bits", [2, 4, 8])
@pytest.mark.parametrize("mag", [0.0, 1e-45, 1e-38, 1e-12, 1e-9, 3e-8, 1e-7, 1e-5, 1e-3])
def test_tiny_groups_keep_the_bound(bits, mag):
    """Ranges at or below the 1e-8 floor, and scales in fp16's subnormal range: codes never clamp
    and |w - w~| <= s/2 holds (fp64 check from the stored bits)."""
    g = torch.Generator().manual_seed(bits)
    w = (torch.rand(3, 64, generator=g) * 2 - 1) * mag
    w[1] = w[1].abs()  # all positive
    w[2] = -w[2].abs()  # all negative
    q = INTx.quantize(w, bits=bits, group_size=16)
    assert (q.scale.float() > 0).all() and torch.isfinite(q.scale.float()).all()
    s = q.scale.double().repeat_interleave(16, 1)[:, :64]
    err = (w.double() - _dequant_ref_t(q)).abs()
    assert (err <= s / 2 * (1 + 2**-20)).all()
    qmax = (1 << bits) - 1
    # no code clamps: q - z reproduces round(w / s) exactly where |w / s| stays within the range
    assert ((q.codes().long() >= 0) & (q.codes().long() <= qmax)).all()


@pytest.mark.parametrize("shape", [(0, 64), (3, 0), (0, 0)])
def test_empty_weight_gives_empty_result(shape):
    q = INTx.quantize(torch.zeros(shape), bits=4, group_size=32)
    assert q.shape == shape and q.dequantize().shape == shape
