"""Triton helpers the certified kernels share: exact fp32 dots of x with stored rows, and int64 keys
that order (value desc, token asc) -- order-preserving fp32 bits high, ``2^31 - 1 - token`` low --
so one integer maximum or top-k picks the best value and, among equal values, the lower token."""
from __future__ import annotations

import triton
import triton.language as tl

INT64_MIN = tl.constexpr(-(2**63))


@triton.jit
def ordered_bits(bits):
    """The int32 bits of an fp32 as an int32 with the float's order (the negative ones'
    magnitude bits flipped); its own inverse."""
    return tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits)


@triton.jit
def pack_key(val, tok):
    """int64 key ordering (val desc, tok asc): order-preserving fp32 bits high, 2^31-1-tok low."""
    return (ordered_bits(val.to(tl.int32, bitcast=True)).to(tl.int64) << 32) | (2147483647 - tok.to(tl.int64))


@triton.jit
def unpack_key(key):
    """(val fp32, tok int64) of :func:`pack_key` keys."""
    bits = ordered_bits((key >> 32).to(tl.int32))
    return bits.to(tl.float32, bitcast=True), 2147483647 - (key & 0xFFFFFFFF)


@triton.jit
def exact_dot_one(x_ptr, w_ptr, m, t, stride_xm, stride_wn, K: tl.constexpr, BK: tl.constexpr):
    """fp32 scalar: the exact dot of row m of x with token t (fp32 products summed in fp32)."""
    o_k = tl.arange(0, BK)
    acc = tl.zeros([BK], dtype=tl.float32)
    for k0 in range(0, K, BK):
        m_k = (k0 + o_k) < K
        b_w = tl.load(w_ptr + t * stride_wn + k0 + o_k, mask=m_k, other=0.0).to(tl.float32)
        b_x = tl.load(x_ptr + m * stride_xm + k0 + o_k, mask=m_k, other=0.0).to(tl.float32)
        acc += b_w * b_x
    return tl.sum(acc, axis=0)


@triton.jit
def exact_dot_block(x_ptr, w_ptr, m, o_t, m_t, stride_xm, stride_wn, K: tl.constexpr, BK: tl.constexpr):
    """fp32 [T]: exact dots of row m of x with tokens ``o_t`` (``m_t``: the real ones)."""
    o_k = tl.arange(0, BK)
    acc = tl.zeros([o_t.shape[0], BK], dtype=tl.float32)
    for k0 in range(0, K, BK):
        m_k = (k0 + o_k) < K
        b_w = tl.load(w_ptr + o_t.to(tl.int64)[:, None] * stride_wn + k0 + o_k[None, :],
                      mask=m_t[:, None] & m_k[None, :], other=0.0).to(tl.float32)
        b_x = tl.load(x_ptr + m * stride_xm + k0 + o_k, mask=m_k, other=0.0).to(tl.float32)
        acc += b_w * b_x[None, :]
    return tl.sum(acc, axis=1)


__all__ = ["INT64_MIN", "exact_dot_block", "exact_dot_one", "ordered_bits", "pack_key", "unpack_key"]
