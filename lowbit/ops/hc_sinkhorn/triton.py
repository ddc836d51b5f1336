"""Triton kernel for the hyper-connection split + Sinkhorn normalisation.

One program handles BLOCK_R (batch, seq) rows; each row's hc x hc matrix lives in registers as
a [BLOCK_R, HC_PAD, HC_PAD] block for all iterations, so the kernel reads ``mixes`` once and
writes pre / post / comb once.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _hc_split_sinkhorn_kernel(
    mixes_ptr, scale_ptr, base_ptr, pre_ptr, post_ptr, comb_ptr,
    R, S, stride_mb, stride_ms, stride_mk, eps,
    HC: tl.constexpr, HC_PAD: tl.constexpr, ITERS: tl.constexpr, BLOCK_R: tl.constexpr,
):
    i_r = tl.program_id(0).to(tl.int64)
    o_r = i_r * BLOCK_R + tl.arange(0, BLOCK_R)
    m_r = o_r < R
    # rows may be strided as [b, s]: address by (b, s), not by a flat row stride
    p_row = mixes_ptr + (o_r // S) * stride_mb + (o_r % S) * stride_ms
    o_i = tl.arange(0, HC_PAD)
    m_i = o_i < HC

    b_scale0 = tl.load(scale_ptr)
    b_scale1 = tl.load(scale_ptr + 1)
    b_scale2 = tl.load(scale_ptr + 2)

    # pre / post: [BLOCK_R, HC_PAD]
    m_rv = m_r[:, None] & m_i[None, :]
    x_pre = tl.load(p_row[:, None] + o_i[None, :] * stride_mk, mask=m_rv, other=0.0)
    x_post = tl.load(p_row[:, None] + (HC + o_i)[None, :] * stride_mk, mask=m_rv, other=0.0)
    base_pre = tl.load(base_ptr + o_i, mask=m_i, other=0.0)
    base_post = tl.load(base_ptr + HC + o_i, mask=m_i, other=0.0)
    pre = tl.sigmoid(x_pre * b_scale0 + base_pre[None, :]) + eps
    post = 2.0 * tl.sigmoid(x_post * b_scale1 + base_post[None, :])
    o_rv = o_r[:, None] * HC + o_i[None, :]
    tl.store(pre_ptr + o_rv, pre, mask=m_rv)
    tl.store(post_ptr + o_rv, post, mask=m_rv)

    # comb: [BLOCK_R, HC_PAD, HC_PAD], element (i, j) at 2*HC + i*HC + j
    o_ij = o_i[:, None] * HC + o_i[None, :]
    m_ij = m_i[:, None] & m_i[None, :]
    m_c = m_r[:, None, None] & m_ij[None, :, :]
    x = tl.load(p_row[:, None, None] + (2 * HC + o_ij)[None, :, :] * stride_mk, mask=m_c, other=0.0)
    base_c = tl.load(base_ptr + 2 * HC + o_ij, mask=m_ij, other=0.0)
    c = x * b_scale2 + base_c[None, :, :]
    # padded columns must not enter the row softmax; padded entries stay 0 afterwards
    c = tl.where(m_ij[None, :, :], c, -1.0e30)
    c = c - tl.max(c, 2)[:, :, None]
    c = tl.exp(c)
    c = c / tl.sum(c, 2)[:, :, None]
    c = tl.where(m_ij[None, :, :], c + eps, 0.0)
    c = c / (tl.sum(c, 1)[:, None, :] + eps)
    for _ in range(ITERS - 1):
        c = c / (tl.sum(c, 2)[:, :, None] + eps)
        c = c / (tl.sum(c, 1)[:, None, :] + eps)
    tl.store(comb_ptr + o_r[:, None, None] * (HC * HC) + o_ij[None, :, :], c, mask=m_c)


def _block_r(hc_pad: int) -> int:
    # 32 matrices of 4x4 per program at hc = 4: 512 fp32 values, 4 per thread at 4 warps.
    return max(1, 512 // (hc_pad * hc_pad))


def hc_split_sinkhorn_triton(
    mixes: torch.Tensor,
    hc_scale: torch.Tensor,
    hc_base: torch.Tensor,
    hc_mult: int,
    sinkhorn_iters: int,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Launch the kernel (inputs already validated)."""
    b, s, _ = mixes.shape
    hc = hc_mult
    pre = torch.empty(b, s, hc, dtype=torch.float32, device=mixes.device)
    post = torch.empty(b, s, hc, dtype=torch.float32, device=mixes.device)
    comb = torch.empty(b, s, hc, hc, dtype=torch.float32, device=mixes.device)
    rows = b * s
    if rows == 0:
        return pre, post, comb
    hc_pad = triton.next_power_of_2(hc)
    block_r = _block_r(hc_pad)
    _hc_split_sinkhorn_kernel[(triton.cdiv(rows, block_r),)](
        mixes, hc_scale.contiguous(), hc_base.contiguous(), pre, post, comb,
        rows, s, *mixes.stride(), float(eps),
        HC=hc, HC_PAD=hc_pad, ITERS=sinkhorn_iters, BLOCK_R=block_r, num_warps=4,
    )
    return pre, post, comb
