"""Pieces every Triton coarse kernel of the draft head shares: the block epilogue (zero point and
bound terms, logits, per-block candidates), the launch's output tensors and two integer helpers.

The epilogue's ``KIND`` is the packing kind of :mod:`lowbit.ops.coarse_head.packing` (0 INTx, 1 FP8
rows, 2 NVFP4 rows) or ``KIND_DONE`` for a kernel whose accumulator already holds the coarse logits.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

#: epilogue kind of a kernel whose accumulator already holds the coarse logits (zero point
#: applied); a constexpr so the kernels can name it
KIND_DONE = tl.constexpr(3)


def pow2(n: int) -> int:
    """Smallest power of two >= n (plain Python: triton.next_power_of_2 is a constexpr function
    whose call costs several µs of host time, which matters at M = 1 in eager mode)."""
    return 1 << (int(n) - 1).bit_length() if n > 1 else 1


def cdiv(a: int, b: int) -> int:
    return -(-int(a) // int(b))


def coarse_outputs(m: int, n: int, nb: int, kcand: int, certified: bool, write_logits: bool, device):
    """The six fresh :class:`CoarseOut` tensors of a launch, in its order: (cand_key [M, C],
    cand_lb, cand_idx int64 [M, C], block_lb [M, NB], block_rest [M, NB], logits [M, N]); the
    certified ones and the logits have 0 rows when not asked for. Every one is its own tensor (a
    custom op's outputs may not alias each other)."""
    c = nb * kcand
    mc = m if certified else 0
    f32 = dict(dtype=torch.float32, device=device)
    return (torch.empty(m, c, **f32), torch.empty(mc, c, **f32), torch.empty(m, c, dtype=torch.int64, device=device),
            torch.empty(mc, nb, **f32), torch.empty(mc, nb, **f32), torch.empty(m if write_logits else 0, n, **f32))


@triton.jit
def block_epilogue(acc, bnd, st_ptr, s_ptr, z_ptr, gs_ptr, ck_ptr, clb_ptr, ci_ptr, blb_ptr, brest_ptr, lg_ptr,
              o_m, m_m, o_n, m_n, i_n, M, N, NB, stride_sn, bcoef, sigma, abs_slack,
              NG: tl.constexpr, KIND: tl.constexpr, BOUND: tl.constexpr, USE_DOT: tl.constexpr,
              ZOFF: tl.constexpr, WRITE_LOGITS: tl.constexpr, KCAND: tl.constexpr, GC: tl.constexpr,
              BN: tl.constexpr):
    """After the K loop, shared by the coarse kernels: ``acc`` / ``bnd`` fp32 [BM, BN] (BM = 1
    for the GEMVs) get the per-group zero-point and bound terms (INTx) or the row / global scale
    (native rows; nothing for KIND_DONE); then the logits are written if asked and the block's
    ``KCAND`` candidates emitted by successive max-and-mask (ties to the lower index)."""
    NBK = NB * KCAND
    if KIND == 0:
        # zero point and bound terms, per group: [BM, NG] x-statistics times [NG, BN] (s*z, s, s^2)
        # not software-pipelined: prefetching the [BN, GC] / [BM, GC] tiles across trips costs
        # registers (spills at BM = 32 / 64 on long heads) and measured slower (docs/design-notes.md)
        for g0 in tl.range(0, NG, GC, num_stages=1):
            o_g = g0 + tl.arange(0, GC)
            m_g = o_g < NG
            p_sg = o_n[:, None] * stride_sn + o_g[None, :]
            # [BN, GC]
            b_s = tl.load(s_ptr + p_sg, mask=m_n[:, None] & m_g[None, :], other=0.0).to(tl.float32)
            b_z = tl.load(z_ptr + p_sg, mask=m_n[:, None] & m_g[None, :], other=0).to(tl.float32) + ZOFF
            # [BM, GC]
            p_st = st_ptr + o_m[:, None] * NG + o_g[None, :]
            m_st = m_m[:, None] & m_g[None, :]
            b_xs = tl.load(p_st, mask=m_st, other=0.0)
            if BOUND == 1:
                b_xb = tl.load(p_st + M * NG, mask=m_st, other=0.0)
                b_sb = b_s
            elif BOUND == 2:
                b_xb = tl.load(p_st + 2 * M * NG, mask=m_st, other=0.0)
                b_sb = b_s * b_s
            if USE_DOT:
                acc -= tl.dot(b_xs, tl.trans(b_s * b_z), input_precision="ieee")
                if BOUND != 0:
                    bnd += tl.dot(b_xb, tl.trans(b_sb), input_precision="ieee")
            else:
                acc -= tl.sum(b_xs * (b_s * b_z), axis=1)[None, :]
                if BOUND != 0:
                    bnd += tl.sum(b_xb * b_sb, axis=1)[None, :]
    elif KIND == 1:
        b_rs = tl.load(s_ptr + o_n * stride_sn, mask=m_n, other=0.0)  # fp32 row scales
        acc = acc * b_rs[None, :]
        bnd = bnd * b_rs[None, :]
    elif KIND == 2:
        gsc = tl.load(gs_ptr)
        acc = acc * gsc
        bnd = bnd * gsc
    # KIND_DONE: the caller's accumulator is already the coarse logit

    if WRITE_LOGITS:
        tl.store(lg_ptr + o_m[:, None] * N + o_n[None, :], acc, mask=m_m[:, None] & m_n[None, :])
    neg = float("-inf")
    if BOUND == 1:
        b = bnd * bcoef + abs_slack
    elif BOUND == 2:
        b = sigma * tl.sqrt(bnd * (1.0 / 12.0))
    if BOUND != 0:
        key = acc + b
        lb = tl.where(m_n[None, :], acc - b, neg)
        tl.store(blb_ptr + o_m * NB + i_n, tl.max(lb, axis=1), mask=m_m)
    else:
        key = acc
    key = tl.where(m_n[None, :], key, neg)
    big = N + BN
    o_c = o_m * NBK + i_n * KCAND
    # successive max-and-mask: the block's KCAND best keys, ties to the lower index
    for c in tl.static_range(KCAND):
        best = tl.max(key, axis=1)  # [BM]
        loc = tl.min(tl.where(key == best[:, None], o_n[None, :], big), axis=1)
        sel = o_n[None, :] == loc[:, None]
        tl.store(ck_ptr + o_c + c, best, mask=m_m)
        tl.store(ci_ptr + o_c + c, tl.where(best == neg, 0, loc), mask=m_m)
        if BOUND != 0:
            tl.store(clb_ptr + o_c + c, tl.max(tl.where(sel, lb, neg), axis=1), mask=m_m)
        key = tl.where(sel, neg, key)
    if BOUND != 0:
        tl.store(brest_ptr + o_m * NB + i_n, tl.max(key, axis=1), mask=m_m)


__all__ = ["KIND_DONE", "block_epilogue", "cdiv", "coarse_outputs", "pow2"]
