"""Helpers of the inline-PTX MMA kernels (``coarse_head/``, ``fp8_gemm/mma_gemv.py``, ``gathered/mma_nvfp4.py``),
which keep one value per thread in ``[NT]`` tensors and a thread's short vectors in ``[NT, n]``
tensors: splitting such a vector into its columns stays inside the thread (no layout change).
Also the tuple-of-zeros builder of their accumulator tiles and the interpreter's m16n8k16 MMA."""
from __future__ import annotations

import triton
import triton.language as tl


def i32(v: int) -> int:
    """A 32-bit pattern as the signed int32 Triton's constants must be (for ``tl.constexpr`` masks)."""
    return v - (1 << 32) if v >= 1 << 31 else v


@triton.jit
def split2(t, NT: tl.constexpr):
    """[NT, 2] -> its 2 columns as [NT] (in-thread)."""
    return tl.split(tl.reshape(t, [NT, 2]))


@triton.jit
def split4(t, NT: tl.constexpr):
    """[NT, 4] -> its 4 columns as [NT] (in-thread)."""
    a, b = tl.split(tl.reshape(t, [NT, 2, 2]))  # columns 0, 2 / 1, 3
    e0, e2 = tl.split(a)
    e1, e3 = tl.split(b)
    return e0, e1, e2, e3


@triton.jit
def zeros_tuple(z, N: tl.constexpr):
    """The tuple (z, ..., z) of length N (z a tensor or a tuple of them)."""
    res = ()
    for _ in tl.static_range(N):
        res = res + (z,)
    return res


@triton.jit
def tuple_replace(tup, i: tl.constexpr, v):
    """``tup`` with element i replaced by v (Triton tuples are immutable)."""
    res = ()
    for j in tl.static_range(len(tup)):
        if j == i:
            res = res + (v,)
        else:
            res = res + (tup[j],)
    return res


@triton.jit
def half_pair(v):
    """int32 [..] holding two fp16 values -> (low, high) as fp32 (interpreter emulation)."""
    lo = (v & 0xFFFF).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
    hi = ((v >> 16) & 0xFFFF).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
    return lo, hi


@triton.jit
def pack_halves(lo, hi):
    """Two fp32 tensors -> int32 holding (fp16(lo), fp16(hi)) in the low / high half."""
    b_lo = lo.to(tl.float16).to(tl.int16, bitcast=True).to(tl.int32) & 0xFFFF
    b_hi = hi.to(tl.float16).to(tl.int16, bitcast=True).to(tl.int32) & 0xFFFF
    return b_lo | (b_hi << 16)


@triton.jit
def mma16816_values(a0l, a0h, a1l, a1h, a2l, a2h, a3l, a3h, b0l, b0h, b1l, b1h, NT: tl.constexpr):
    """A B of one warp-wide ``mma.sync.m16n8k16`` from the fp32 values of its operands' halves
    (``a0l`` = the low half of register a0, ...), per lane as [NT]: the interpreter's stand-in for
    the PTX (fp32 products and sums). Fragments: a0 = (row g, k 2t, 2t+1), a1 = (row g + 8, ..),
    a2 = (row g, k 2t+8, 2t+9), a3 = (row g + 8, ..); b0 = (k 2t, 2t+1, column g), b1 = (k 2t+8,
    2t+9, ..); returns (d0, d1, d2, d3) = (row g, columns 2t, 2t+1), (row g + 8, ..), lane 4 g + t."""
    W: tl.constexpr = NT // 32
    R: tl.constexpr = [NT // 32, 8, 1, 4]  # A taps [W, 8 (g), 1, 4 (t)]
    Q: tl.constexpr = [NT // 32, 1, 8, 4]  # B taps [W, 1, 8 (n), 4 (t)]
    q0l = tl.reshape(b0l, Q)
    q0h = tl.reshape(b0h, Q)
    q1l = tl.reshape(b1l, Q)
    q1h = tl.reshape(b1h, Q)
    top = tl.sum(tl.reshape(a0l, R) * q0l + tl.reshape(a0h, R) * q0h + tl.reshape(a2l, R) * q1l
                 + tl.reshape(a2h, R) * q1h, 3)
    bot = tl.sum(tl.reshape(a1l, R) * q0l + tl.reshape(a1h, R) * q0h + tl.reshape(a3l, R) * q1l
                 + tl.reshape(a3h, R) * q1h, 3)
    t0, t1 = tl.split(tl.reshape(top, [W, 8, 4, 2]))  # columns 2t, 2t + 1 of row g
    u0, u1 = tl.split(tl.reshape(bot, [W, 8, 4, 2]))
    return tl.reshape(t0, [NT]), tl.reshape(t1, [NT]), tl.reshape(u0, [NT]), tl.reshape(u1, [NT])


@triton.jit
def mma16816_f16x2(a0, a1, a2, a3, b0, b1, NT: tl.constexpr):
    """A B of one warp-wide fp16 ``mma.sync.m16n8k16`` whose operands are per-lane int32 [NT]
    words holding f16x2 (the interpreter's stand-in; fragments as in :func:`mma16816_values`)."""
    a0l, a0h = half_pair(a0)
    a1l, a1h = half_pair(a1)
    a2l, a2h = half_pair(a2)
    a3l, a3h = half_pair(a3)
    b0l, b0h = half_pair(b0)
    b1l, b1h = half_pair(b1)
    return mma16816_values(a0l, a0h, a1l, a1h, a2l, a2h, a3l, a3h, b0l, b0h, b1l, b1h, NT)
