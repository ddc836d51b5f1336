"""NVFP4: the ModelOpt quantization rule re-implemented independently (numpy + ml_dtypes),
dequantization from the stored bits in fp64, the 128x4 swizzle, validation."""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from lowbit.formats import NVFP4, swizzle_scales, unswizzle_scales
from tests.formats._ref import e2m1_decode_ref

F32 = np.float32


def modelopt_reference(w: torch.Tensor):
    """(packed bytes, e4m3 scale bytes, global scale) by the ModelOpt rule in numpy fp32."""
    x = w.float().numpy()
    n, k = x.shape
    amax = np.abs(x).max()
    gs = F32(amax) / F32(6.0 * 448.0)
    if gs == 0:
        gs = F32(1.0)
    blk = x.reshape(n, k // 16, 16)
    s = np.abs(blk).max(-1) / (F32(6.0) * gs)
    s = np.where(s == 0, F32(1.0), s).astype(F32)
    s = np.maximum(s, F32(2.0**-9))
    s8 = np.clip(s, -448, 448).astype(ml_dtypes.float8_e4m3fn)
    denom = s8.astype(F32) * gs
    y = (blk / denom[..., None]).reshape(n, k).astype(F32)
    codes = y.astype(ml_dtypes.float4_e2m1fn).view(np.uint8).astype(np.uint8)
    codes = np.where(y == 0, 0, codes)  # lowbit's documented -0.0 -> 0x0 (ml_dtypes gives 0x8)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
    return packed, s8.view(np.uint8), gs


def _weight(n, k, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, k, generator=g) * torch.exp2(torch.randint(-8, 4, (n, k // 16, 1), generator=g).float()).repeat_interleave(16, -1).view(n, k)


@pytest.mark.parametrize("n,k", [(1, 16), (5, 48), (33, 160), (8, 1024)])
def test_quantize_matches_independent_modelopt_rule(n, k):
    w = _weight(n, k, n * 1000 + k)
    w[0, :16] = 0.0  # an all-zero block: scale 1.0
    if n > 1:
        w[1, :16] *= 1e-6  # a block far below the global amax: scale floor 2^-9
    q = NVFP4.quantize(w)
    packed, s8, gs = modelopt_reference(w)
    assert q.packed.shape == (n, k // 2) and q.scale.shape == (n, k // 16) and q.global_scale.shape == ()
    assert np.array_equal(q.packed.numpy(), packed)
    assert np.array_equal(q.scale.view(torch.uint8).numpy(), s8)
    assert q.global_scale.item() == float(gs)
    assert q.scale[0, 0].float().item() == 1.0
    if n > 1:
        assert q.scale[1, 0].float().item() == 2.0**-9


def test_dequantize_matches_fp64_formula_from_stored_bits():
    w = _weight(7, 64, 3)
    q = NVFP4.quantize(w)
    vals = e2m1_decode_ref(q.packed)  # fp64 from the bit fields
    s = q.scale.view(torch.uint8).numpy().view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    ref = vals * np.repeat(s, 16, axis=1) * float(q.global_scale)
    out = q.dequantize(torch.float64).numpy()
    # two fp32 roundings (scale * global_scale, then * value): within one fp32 ulp of the exact value
    assert np.allclose(out, ref, rtol=2**-22, atol=0)
    assert np.array_equal(np.sign(out), np.sign(ref)) and np.array_equal(out == 0, ref == 0)


def test_known_small_example():
    w = torch.tensor([[0.5, 1.5] + [0.0] * 13 + [6.0]])
    q = NVFP4.quantize(w, global_scale=1.0)
    assert q.scale.float().item() == 1.0 and q.packed[0, 0].item() == 0x31 and q.packed[0, 7].item() == 0x70
    assert torch.equal(q.dequantize(), w)


@given(n=st.integers(1, 6), kb=st.integers(1, 6), seed=st.integers(0, 2**31 - 1))
def test_quantize_dequantize_quantize_idempotent(n, kb, seed):
    w = _weight(n, 16 * kb, seed)
    q1 = NVFP4.quantize(w)
    d1 = q1.dequantize()
    q2 = NVFP4.quantize(d1, global_scale=q1.global_scale)
    assert torch.equal(q2.scale.view(torch.uint8), q1.scale.view(torch.uint8))
    assert torch.equal(q2.dequantize(), d1)
    # with a recomputed global scale the values agree to rounding of the new global scale
    q3 = NVFP4.quantize(d1)
    assert torch.allclose(q3.dequantize(), d1, rtol=1e-6, atol=0)


def test_global_scale_argument_and_rejections():
    w = torch.randn(4, 32)
    q = NVFP4.quantize(w, global_scale=torch.tensor([0.01]))
    assert q.global_scale.item() == pytest.approx(0.01) and q.global_scale.dim() == 0
    with pytest.raises(ValueError, match="positive"):
        NVFP4.quantize(w, global_scale=0.0)
    with pytest.raises(ValueError, match="group size"):
        NVFP4.quantize(w, group_size=32)
    with pytest.raises(ValueError, match="K % 16"):
        NVFP4.quantize(torch.randn(4, 24))
    with pytest.raises(ValueError, match="dims"):
        NVFP4.quantize(torch.randn(32))
    with pytest.raises(ValueError, match="floating"):
        NVFP4.quantize(torch.ones(4, 32, dtype=torch.int64))
    with pytest.raises(ValueError, match="scale has shape"):
        NVFP4(q.packed, q.scale[:, :1].contiguous(), q.global_scale)
    with pytest.raises(ValueError, match="dtype"):
        NVFP4(q.packed, q.scale.float(), q.global_scale)
    with pytest.raises(ValueError, match="dims"):
        NVFP4(q.packed, q.scale, q.global_scale.reshape(1))
    with pytest.raises(ValueError, match="group size"):
        NVFP4(q.packed, q.scale, q.global_scale, 32)


def test_to_and_nbytes():
    q = NVFP4.quantize(torch.randn(8, 64))
    assert q.nbytes == 8 * 32 + 8 * 4 + 4
    assert q.to("cpu").device.type == "cpu" and torch.equal(q.to("cpu").packed, q.packed)


def _swizzle_loop(s: torch.Tensor) -> torch.Tensor:
    """The CUTLASS 128x4 layout by its offset formula: tile (mt, kt) of 512, then 16*b + 4*a + d."""
    r, c = s.shape
    rp, cp = -(-r // 128) * 128, -(-c // 4) * 4
    out = torch.zeros(rp * cp, dtype=s.dtype)
    for row in range(r):
        mt, a, b = row // 128, (row % 128) // 32, row % 32
        for col in range(c):
            kt, d = col // 4, col % 4
            out[((mt * (cp // 4) + kt) * 32 + b) * 16 + a * 4 + d] = s[row, col]
    return out.view(rp, cp)


def test_swizzle_pinned_small_example():
    s = torch.arange(128 * 4, dtype=torch.int32).view(128, 4)  # value = 4*row + col
    z = swizzle_scales(s).flatten()
    assert z[:8].tolist() == [0, 1, 2, 3, 32 * 4, 32 * 4 + 1, 32 * 4 + 2, 32 * 4 + 3]  # rows 0, 32
    assert z[16].item() == 4 and z[12].item() == 96 * 4  # row 1; row 96
    assert torch.equal(swizzle_scales(s), _swizzle_loop(s))


@pytest.mark.parametrize("rows,cols", [(1, 1), (128, 4), (130, 5), (257, 12), (3, 9)])
def test_swizzle_formula_and_exact_inverse(rows, cols):
    s = torch.randint(0, 256, (rows, cols), dtype=torch.uint8).view(torch.float8_e4m3fn)
    z = swizzle_scales(s)
    assert z.shape == (-(-rows // 128) * 128, -(-cols // 4) * 4) and z.dtype == s.dtype
    assert torch.equal(z.view(torch.uint8), _swizzle_loop(s.view(torch.uint8)))
    assert torch.equal(unswizzle_scales(z, rows, cols).view(torch.uint8), s.view(torch.uint8))


def test_nvfp4_swizzled_scale_and_unswizzle_errors():
    q = NVFP4.quantize(torch.randn(3, 64))
    assert torch.equal(q.swizzled_scale().view(torch.uint8), swizzle_scales(q.scale).view(torch.uint8))
    with pytest.raises(ValueError, match="swizzled scales"):
        unswizzle_scales(torch.zeros(100, 4), 100, 4)
    with pytest.raises(ValueError, match="do not match"):
        unswizzle_scales(torch.zeros(128, 4), 128, 8)
    with pytest.raises(ValueError, match="do not match"):
        unswizzle_scales(torch.zeros(256, 4), 100, 4)
    with pytest.raises(ValueError, match="dims"):
        swizzle_scales(torch.zeros(4))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_input_refused_naming_where(bad):
    w = torch.randn(4, 64)
    w[2, 50] = bad  # one inf made the global scale inf and the whole tensor NaN
    with pytest.raises(ValueError, match=r"non-finite.*\(2, 50\)"):
        NVFP4.quantize(w)


@pytest.mark.parametrize("gs", [float("inf"), float("nan"), 0.0, -1.0, torch.tensor([1.0, 2.0])])
def test_bad_global_scale_refused(gs):
    with pytest.raises(ValueError, match="global_scale"):
        NVFP4.quantize(torch.randn(4, 64), global_scale=gs)


@pytest.mark.parametrize("shape", [(0, 64), (4, 0), (0, 0)])
def test_empty_weight_is_value_error(shape):
    with pytest.raises(ValueError, match="non-empty"):  # was a RuntimeError (amax of nothing)
        NVFP4.quantize(torch.zeros(shape))
