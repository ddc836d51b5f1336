"""Triton kernels of the parallel head's key encode (before the all-gather) and merge (after).

The reference (``_merge.py``) is about 20 small PyTorch launches around the collective; once the
certified DraftHead has synchronized with the host they run back to back at launch cost, so
each side is one kernel here. Keys are bit-identical to ``_merge.encode_keys``.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from lowbit.distributed._merge import MAX_INDEX, PAD_KEY

# The merge sorts next_pow2(world) * next_pow2(k) keys of a row in registers (bitonic): past
# this many the reference (torch.topk) takes over. 8 ranks x k 512 = 4096.
MAX_MERGE_KEYS = 4096


@triton.jit
def _topk_encode_kernel(
    p_v, p_i, p_out, KK, K, offset, pad,
    s_vm, s_vk, s_im, s_ik, s_om, s_ok,
    KP: tl.constexpr,
):
    """Row m: out[m, j] = key(v[m, j], offset - i[m, j]) for j < KK, pad for KK <= j < K."""
    i_m = tl.program_id(0).to(tl.int64)
    o_k = tl.arange(0, KP)
    m_real = o_k < KK
    # [KP]
    b_v = tl.load(p_v + i_m * s_vm + o_k * s_vk, mask=m_real, other=0.0)
    b_i = tl.load(p_i + i_m * s_im + o_k * s_ik, mask=m_real, other=0).to(tl.int64)
    bits = b_v.to(tl.int32, bitcast=True)
    bits = tl.where(bits == -2147483648, 0, bits)  # -0.0 -> +0.0: the zeros tie
    ordered = tl.where(bits >= 0, bits, bits ^ 0x7FFFFFFF).to(tl.int64)
    key = (ordered << 32) | (offset - b_i)
    key = tl.where(m_real, key, pad)
    tl.store(p_out + i_m * s_om + o_k * s_ok, key, mask=o_k < K)


@triton.jit
def _topk_merge_kernel(
    p_g, p_ov, p_oi, W, KR, K, max_index, pad,
    s_gw, s_gm, s_gk, s_ovm, s_ovk, s_oim, s_oik,
    WP: tl.constexpr, KP: tl.constexpr,
):
    """Row m: sort the W x KR keys of every rank descending, decode the first K."""
    i_m = tl.program_id(0).to(tl.int64)
    o_w = tl.arange(0, WP)
    o_k = tl.arange(0, KP)
    m_g = (o_w < W)[:, None] & (o_k < KR)[None, :]
    # [WP, KP]
    b_g = tl.load(p_g + o_w[:, None] * s_gw + i_m * s_gm + o_k[None, :] * s_gk, mask=m_g, other=pad)
    srt = tl.sort(tl.reshape(b_g, [WP * KP]), descending=True)
    hi = srt >> 32  # arithmetic: the signed ordered value
    low = srt - (hi << 32)  # the low 32 bits, non-negative
    ordered = hi.to(tl.int32)
    bits = tl.where(ordered >= 0, ordered, ordered ^ 0x7FFFFFFF)
    o_n = tl.arange(0, WP * KP)
    m_o = o_n < K
    tl.store(p_ov + i_m * s_ovm + o_n * s_ovk, bits.to(tl.float32, bitcast=True), mask=m_o)
    tl.store(p_oi + i_m * s_oim + o_n * s_oik, max_index - low, mask=m_o)


def _next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def encode_pad(values: torch.Tensor, indices: torch.Tensor, vocab_start: int, k: int) -> torch.Tensor:
    """Launcher of :func:`lowbit.distributed._merge.encode_pad`: int64 keys ``[M, k]``."""
    m, kk = values.shape
    out = torch.empty((m, k), dtype=torch.int64, device=values.device)
    if m == 0:
        return out
    _topk_encode_kernel[(m,)](
        values, indices, out, kk, k, MAX_INDEX - vocab_start, PAD_KEY,
        values.stride(0), values.stride(1), indices.stride(0), indices.stride(1), out.stride(0), out.stride(1),
        KP=_next_pow2(k),
    )
    return out


def merge_fits(world: int, kr: int) -> bool:
    return _next_pow2(world) * _next_pow2(kr) <= MAX_MERGE_KEYS


def merge_gathered(gathered: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Launcher of :func:`lowbit.distributed._merge.merge_gathered` (needs :func:`merge_fits`)."""
    world, m, kr = gathered.shape
    values = torch.empty((m, k), dtype=torch.float32, device=gathered.device)
    indices = torch.empty((m, k), dtype=torch.int64, device=gathered.device)
    if m == 0:
        return values, indices
    _topk_merge_kernel[(m,)](
        gathered, values, indices, world, kr, k, MAX_INDEX, PAD_KEY,
        gathered.stride(0), gathered.stride(1), gathered.stride(2),
        values.stride(0), values.stride(1), indices.stride(0), indices.stride(1),
        WP=_next_pow2(world), KP=_next_pow2(kr),
    )
    return values, indices
