"""Triton kernel of the draft head's coarse pass: decode, dot, bound, per-block candidates.

One program owns ``BN`` consecutive tokens (one candidate block) and ``BM`` rows of x. It streams
its rows of the coarse weight once, keeps the coarse logits ``acc [BM, BN]`` (and the bound
accumulator ``bnd``) in fp32 registers, and emits the block's top-``KCAND`` by successive
max-and-mask — no [M, N] logits are written unless asked, and no full-row top-k pass exists.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from lowbit._backend import interpret_mode
from lowbit.ops.coarse_head.reference import ABS_SLACK, BOUND_NONE, rounding_eps

KIND_INTX, KIND_FP8, KIND_NVFP4 = 0, 1, 2
#: epilogue kind of a kernel whose accumulator already holds the coarse logits (zero point
#: applied); a constexpr so the kernels can name it
KIND_DONE = tl.constexpr(3)


def _pow2(n: int) -> int:
    """Smallest power of two >= n (plain Python: triton.next_power_of_2 is a constexpr function
    whose call costs several µs of host time, which matters at M = 1 in eager mode)."""
    return 1 << (int(n) - 1).bit_length() if n > 1 else 1


def _cdiv(a: int, b: int) -> int:
    return -(-int(a) // int(b))


@triton.jit
def _dot(a, b, DT: tl.constexpr):
    # fp32 operands only under the interpreter (whose bf16 tl.dot is broken): exact, no TF32
    if DT == tl.float32:
        return tl.dot(a, b, input_precision="ieee")
    else:
        return tl.dot(a, b)


@triton.jit
def _x_stats_kernel(x_ptr, st_ptr, M, stride_xm, K: tl.constexpr, NG: tl.constexpr, G: tl.constexpr,
                    GP: tl.constexpr, GC: tl.constexpr):
    """Per (row m, group g): sum x, sum |x|, sum x^2 over k in [gG, gG + G) (zero past K).
    st fp32 [3, M, NG]. One launch per call, so the main loop never reduces x across threads."""
    i_m = tl.program_id(0).to(tl.int64)
    o_g = tl.program_id(1) * GC + tl.arange(0, GC)
    o_e = tl.arange(0, GP)  # GP: G rounded up to a power of two
    o_k = o_g[:, None] * G + o_e[None, :]
    # [GC, GP]
    b_x = tl.load(x_ptr + i_m * stride_xm + o_k, mask=(o_k < K) & (o_g[:, None] < NG) & (o_e[None, :] < G),
                  other=0.0).to(tl.float32)
    m_g = o_g < NG
    base = st_ptr + i_m * NG + o_g
    tl.store(base, tl.sum(b_x, axis=1), mask=m_g)
    tl.store(base + M * NG, tl.sum(tl.abs(b_x), axis=1), mask=m_g)
    tl.store(base + 2 * M * NG, tl.sum(b_x * b_x, axis=1), mask=m_g)


@triton.jit
def _words_step(acc2, b_w, j0, x_ptr, s_ptr, o_n, m_n, o_t, i_m, stride_xm, stride_sn,
                K: tl.constexpr, L: tl.constexpr, P: tl.constexpr, SHIFT: tl.constexpr, MASK: tl.constexpr,
                G: tl.constexpr, BN: tl.constexpr, BW: tl.constexpr, OFFS: tl.constexpr):
    """One K step of the word-GEMV: ``b_w`` int32 [BN, BW] holds bytes [4 j0, 4 j0 + 4 BW) of
    each row; byte b of word t, plane i is element k = i L + 4 (j0 + t) + b. Each code is
    decoded with one and-or into an fp32 whose exponent is chosen per (plane, byte) so that its
    value is exactly ``2^E + q`` (the code sits in the low mantissa bits); one exact subtraction
    gives q — no int->float convert (quarter rate on the CUDA cores). Per plane-step: 4 products
    summed per word, then the group scale once per word (BK divides G: one group per plane-step)."""
    # UNROLL's second tile may start past the row (its codes load as 0): its scale index would then
    # point past the row's scales — for the last row past the tensor, where a NaN times the zero
    # sum made that row's logit NaN (seen under the interpreter) — so the scale load is masked too
    in_row = 4 * j0 < L
    for i in tl.static_range(P):
        b_sc = tl.load(s_ptr + o_n * stride_sn + (i * L + 4 * j0) // G, mask=m_n & in_row, other=0.0).to(tl.float32)
        tmp = tl.zeros([BN, BW], dtype=tl.float32)
        for b in tl.static_range(4):
            o_k = i * L + 4 * (j0 + o_t) + b
            b_x = tl.load(x_ptr + i_m * stride_xm + o_k, mask=o_k < K, other=0.0).to(tl.float32)
            POS = 8 * b + i * SHIFT  # bit position of the code in the word
            if OFFS:
                # every code moved to the top of the mantissa: the float is 2^SHIFT + q exactly,
                # used as is (the 2^SHIFT offset is folded into the zero point: ZOFF)
                PP = 23 - SHIFT
                if POS > PP:
                    v = b_w >> (POS - PP)
                elif POS < PP:
                    v = b_w << (PP - POS)
                else:
                    v = b_w
            elif POS + SHIFT > 23:
                # move the code to bit 23 - SHIFT (the top of the mantissa); sign bits are masked
                PP = 23 - SHIFT
                v = b_w >> (POS - PP)
            else:
                PP = POS
                v = b_w
            # exponent 150 - PP: the float is 2^(23 - PP) * (1 + q 2^(PP - 23)) = 2^(23 - PP) + q
            f = ((v & (MASK << PP)) | ((150 - PP) << 23)).to(tl.float32, bitcast=True)
            if OFFS:
                tmp += f * b_x[None, :]
            else:
                q = f - (8388608.0 / (1 << PP))  # 2^(23 - PP), exact
                tmp += q * b_x[None, :]
        acc2 += tmp * b_sc[:, None]
    return acc2


@triton.jit
def _words_dot_step(acc_t, b_w, j0, x_ptr, s_ptr, o_n, m_n, o_t, o_m, m_m, stride_xm, stride_sn,
                    K: tl.constexpr, L: tl.constexpr, P: tl.constexpr, SHIFT: tl.constexpr, MASK: tl.constexpr,
                    G: tl.constexpr, BN: tl.constexpr, BM: tl.constexpr, BW: tl.constexpr, DT: tl.constexpr,
                    MAGIC: tl.constexpr, SPLIT: tl.constexpr):
    """One K step of the word-dot path (INT2 / INT4, BM >= 16): ``b_w`` int32 [BN, BW] as in
    :func:`_words_step`. Per plane, two and-or ops decode a whole word into bf16 pairs: with
    ``MAGIC`` the halves of ``((w >> sh) & (MASK | MASK << 16)) | 0x43004300`` are the bf16
    values ``128 + q`` of bytes 0 and 2 (``sh = i bits``) or 1 and 3 (``sh = i bits + 8``). The
    four byte-columns are four K-permuted operand tiles [BN, BW] chained into one dot per plane
    (x^T tiles loaded with the same permutation), then the group scale goes on the accumulator."""
    for i in tl.static_range(P):
        b_sc = tl.load(s_ptr + o_n * stride_sn + (i * L + 4 * j0) // G, mask=m_n, other=0.0).to(tl.float32)
        part = tl.zeros([BN, BM], dtype=tl.float32)
        for h in tl.static_range(2):  # h = 0: bytes 0, 2; h = 1: bytes 1, 3
            if MAGIC:
                pair = ((b_w >> (i * SHIFT + 8 * h)) & (MASK | (MASK << 16))) | 0x43004300
                halves = (pair.to(tl.int16).to(tl.bfloat16, bitcast=True),
                          (pair >> 16).to(tl.int16).to(tl.bfloat16, bitcast=True))
            else:
                halves = (((b_w >> (i * SHIFT + 8 * h)) & MASK).to(tl.float32).to(DT),
                          ((b_w >> (i * SHIFT + 8 * h + 16)) & MASK).to(tl.float32).to(DT))
            for e in tl.static_range(2):
                o_k = i * L + 4 * (j0 + o_t) + h + 2 * e  # [BW]
                b_xt = tl.load(x_ptr + o_m[None, :] * stride_xm + o_k[:, None],
                               mask=m_m[None, :] & (o_k < K)[:, None], other=0.0)  # [BW, BM]
                x_hi = b_xt.to(DT)
                if DT == tl.float32:
                    part = tl.dot(halves[e], x_hi, part, input_precision="ieee")
                else:
                    part = tl.dot(halves[e], x_hi, part)
                if SPLIT:
                    part = tl.dot(halves[e], (b_xt.to(tl.float32) - x_hi.to(tl.float32)).to(DT), part)
        acc_t += part * b_sc[:, None]
    return acc_t


@triton.jit
def _epilogue(acc, bnd, st_ptr, s_ptr, z_ptr, gs_ptr, ck_ptr, clb_ptr, ci_ptr, blb_ptr, brest_ptr, lg_ptr,
              o_m, m_m, o_n, m_n, i_n, M, N, NB, stride_sn, bcoef, sigma, abs_slack,
              NG: tl.constexpr, KIND: tl.constexpr, BOUND: tl.constexpr, USE_DOT: tl.constexpr,
              ZOFF: tl.constexpr, WRITE_LOGITS: tl.constexpr, KCAND: tl.constexpr, GC: tl.constexpr,
              BN: tl.constexpr, EPI_STAGES: tl.constexpr = 1):
    """After the K loop, shared by the coarse kernels: ``acc`` / ``bnd`` fp32 [BM, BN] (BM = 1
    for the GEMVs) get the per-group zero-point and bound terms (INTx) or the row / global scale
    (native rows; nothing for KIND_DONE); then the logits are written if asked and the block's
    ``KCAND`` candidates emitted by successive max-and-mask (ties to the lower index)."""
    NBK = NB * KCAND
    if KIND == 0:
        # zero point and bound terms, per group: [BM, NG] x-statistics times [NG, BN] (s*z, s, s^2)
        # EPI_STAGES (EPILOGUE_STAGES) = 1: not software-pipelined -- see EPILOGUE_STAGES
        for g0 in tl.range(0, NG, GC, num_stages=EPI_STAGES):
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



@triton.jit
def _coarse_head_kernel(
    x_ptr, st_ptr, w_ptr, s_ptr, z_ptr, gs_ptr,
    ck_ptr, clb_ptr, ci_ptr, blb_ptr, brest_ptr, lg_ptr,
    M, N, NB,
    stride_xm, stride_wn, stride_sn,
    bcoef, sigma, abs_slack,
    K: tl.constexpr, L: tl.constexpr, NG: tl.constexpr,  # per head: constexpr
    KIND: tl.constexpr, P: tl.constexpr, SHIFT: tl.constexpr, MASK: tl.constexpr, G: tl.constexpr,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, KCAND: tl.constexpr, GC: tl.constexpr,
    BOUND: tl.constexpr, USE_DOT: tl.constexpr, SPLIT: tl.constexpr, DT: tl.constexpr,
    MAGIC: tl.constexpr, ZOFF: tl.constexpr, WRITE_LOGITS: tl.constexpr,
    WORDS: tl.constexpr = False, UNROLL: tl.constexpr = 1, OFFS: tl.constexpr = False,
    EPI_STAGES: tl.constexpr = 1,
):
    i_n = tl.program_id(0).to(tl.int64)
    i_m = tl.program_id(1).to(tl.int64)
    o_n = i_n * BN + tl.arange(0, BN)
    o_m = i_m * BM + tl.arange(0, BM)
    o_b = tl.arange(0, BK)
    m_n = o_n < N
    m_m = o_m < M
    p_w = w_ptr + o_n[:, None] * stride_wn + o_b[None, :]

    if WORDS and USE_DOT:
        # word-dot (INT2 / INT4): w_ptr is the packed codes viewed as int32, stride_wn in words
        BWD: tl.constexpr = BK // 4
        o_t = tl.arange(0, BWD)
        p_ww = w_ptr + o_n[:, None] * stride_wn + o_t[None, :]
        acc_t = tl.zeros([BN, BM], dtype=tl.float32)
        LWD: tl.constexpr = L // 4
        for j0 in range(0, LWD, BWD):
            # streamed once: bypass L1 (.cg) so the scale lines re-read every step stay there
            b_w0 = tl.load(p_ww + j0, mask=m_n[:, None] & ((j0 + o_t) < LWD)[None, :], other=0, cache_modifier=".cg")
            acc_t = _words_dot_step(acc_t, b_w0, j0, x_ptr, s_ptr, o_n, m_n, o_t, o_m, m_m, stride_xm, stride_sn,
                                    K, L, P, SHIFT, MASK, G, BN, BM, BWD, DT, MAGIC, SPLIT)
        bnd_t = tl.zeros([BN, BM], dtype=tl.float32)  # INTx: the bound comes from the x statistics
    elif WORDS:
        # word-GEMV (INTx, BM = 1): w_ptr is the packed codes viewed as int32, stride_wn in words
        BW: tl.constexpr = BK // 4
        o_t = tl.arange(0, BW)
        p_ww = w_ptr + o_n[:, None] * stride_wn + o_t[None, :]
        acc2 = tl.zeros([BN, BW], dtype=tl.float32)
        LW: tl.constexpr = L // 4
        for j0 in range(0, LW, BW * UNROLL):
            # UNROLL tiles loaded before any is used: more bytes in flight per program
            # streamed once: bypass L1 (.cg) so the scale lines re-read every step stay there
            b_w0 = tl.load(p_ww + j0, mask=m_n[:, None] & ((j0 + o_t) < LW)[None, :], other=0, cache_modifier=".cg")
            if UNROLL == 2:
                b_w1 = tl.load(p_ww + j0 + BW, mask=m_n[:, None] & ((j0 + BW + o_t) < LW)[None, :], other=0,
                               cache_modifier=".cg")
            acc2 = _words_step(acc2, b_w0, j0, x_ptr, s_ptr, o_n, m_n, o_t, i_m, stride_xm, stride_sn,
                               K, L, P, SHIFT, MASK, G, BN, BW, OFFS)
            if UNROLL == 2:
                acc2 = _words_step(acc2, b_w1, j0 + BW, x_ptr, s_ptr, o_n, m_n, o_t, i_m, stride_xm, stride_sn,
                                   K, L, P, SHIFT, MASK, G, BN, BW, OFFS)
        bnd2 = tl.zeros([BN, BW], dtype=tl.float32)  # INTx: the bound comes from the x statistics
    elif USE_DOT:
        # transposed: logits^T [BN, BM] = W [BN, BK] @ x^T [BK, BM], so the decoded weight tile
        # is the A operand (Hopper wgmma reads A from registers: no shared-memory round trip)
        acc_t = tl.zeros([BN, BM], dtype=tl.float32)
        bnd_t = tl.zeros([BN, BM], dtype=tl.float32)
    else:
        # GEMV (BM = 1): elementwise fp32 accumulators, reduced once after the loop
        acc2 = tl.zeros([BN, BK], dtype=tl.float32)
        bnd2 = tl.zeros([BN, BK], dtype=tl.float32)
    if not WORDS:
        for j0 in range(0, L, BK):
            m_j = (j0 + o_b) < L
            # [BN, BK] packed bytes: one load feeds all P planes
            b_w = tl.load(p_w + j0, mask=m_n[:, None] & m_j[None, :], other=0)
            for i in tl.static_range(P):
                if KIND == 0:
                    o_k = i * L + j0 + o_b  # plane i holds the contiguous K run [iL + j0, iL + j0 + BK)
                elif KIND == 1:
                    o_k = j0 + o_b
                else:
                    o_k = 2 * (j0 + o_b) + i  # NVFP4: element 2j low nibble, 2j+1 high nibble
                fld = (b_w >> (i * SHIFT)) & MASK  # [BN, BK] uint8
                if KIND == 0:
                    if MAGIC:
                        # bf16 bits 0x4300 | q = 128 + q exactly (q < 128): no int->float convert;
                        # the +128 is folded into the zero point (ZOFF)
                        wd = (fld.to(tl.int16) | 0x4300).to(tl.bfloat16, bitcast=True)
                    else:
                        wd = fld.to(tl.int32).to(tl.float32)  # small integers: exact in any float
                    # the group of this plane-step (BK divides G): its scale goes on the accumulator
                    b_sc = tl.load(s_ptr + o_n * stride_sn + (i * L + j0) // G, mask=m_n, other=0.0).to(tl.float32)
                elif KIND == 1:
                    q = fld.to(tl.int32)
                    # e4m3 -> fp16 bit pattern (value * 2^-8, exact incl. subnormals), then * 256
                    h = ((q & 0x80) << 8) | ((q & 0x7F) << 7)
                    wd = h.to(tl.uint16).to(tl.float16, bitcast=True).to(tl.float32) * 256.0
                else:
                    q = fld.to(tl.int32)
                    # e2m1 -> fp16 bit pattern (value * 2^-14), times the block's e4m3 scale; the
                    # product has <= 6 significant bits, so it is exact in bf16 / fp16
                    h = ((q & 0x8) << 12) | ((q & 0x7) << 9)
                    e2 = h.to(tl.uint16).to(tl.float16, bitcast=True).to(tl.float32) * 16384.0
                    b_s = tl.load(s_ptr + o_n[:, None] * stride_sn + ((j0 + o_b) // 8)[None, :],
                                  mask=m_n[:, None] & m_j[None, :], other=0).to(tl.int32)
                    hs = ((b_s & 0x80) << 8) | ((b_s & 0x7F) << 7)
                    wd = e2 * (hs.to(tl.uint16).to(tl.float16, bitcast=True).to(tl.float32) * 256.0)
                if USE_DOT:
                    # [BK, BM] activations, transposed
                    b_xt = tl.load(x_ptr + o_m[None, :] * stride_xm + o_k[:, None],
                                   mask=m_m[None, :] & (o_k < K)[:, None], other=0.0)
                    w_dt = wd.to(DT)
                    x_hi = b_xt.to(DT)
                    part = _dot(w_dt, x_hi, DT)  # [BN, BM]
                    if SPLIT:
                        part += _dot(w_dt, (b_xt.to(tl.float32) - x_hi.to(tl.float32)).to(DT), DT)
                    if KIND == 0:
                        acc_t += part * b_sc[:, None]
                    else:
                        acc_t += part
                        if BOUND == 1:
                            w_abs = tl.abs(wd).to(DT)
                            xa = tl.abs(b_xt.to(tl.float32))
                            xa_hi = xa.to(DT)
                            bnd_t += _dot(w_abs, xa_hi, DT)
                            if SPLIT:
                                bnd_t += _dot(w_abs, (xa - xa_hi.to(tl.float32)).to(DT), DT)
                else:
                    b_x = tl.load(x_ptr + i_m * stride_xm + o_k, mask=o_k < K, other=0.0).to(tl.float32)  # [BK]
                    t = wd.to(tl.float32) * b_x[None, :]
                    if KIND == 0:
                        acc2 += t * b_sc[:, None]
                    else:
                        acc2 += t
                        if BOUND == 1:
                            bnd2 += tl.abs(t)
    if USE_DOT:
        acc = tl.trans(acc_t)  # [BM, BN]
        bnd = tl.trans(bnd_t)
    else:
        acc = tl.sum(acc2, axis=1)[None, :]  # [1, BN]
        bnd = tl.sum(bnd2, axis=1)[None, :]
    _epilogue(acc, bnd, st_ptr, s_ptr, z_ptr, gs_ptr, ck_ptr, clb_ptr, ci_ptr, blb_ptr, brest_ptr, lg_ptr,
              o_m, m_m, o_n, m_n, i_n, M, N, NB, stride_sn, bcoef, sigma, abs_slack,
              NG, KIND, BOUND, USE_DOT, ZOFF, WRITE_LOGITS, KCAND, GC, BN, EPI_STAGES)


#: Software-pipeline stages of the epilogue's per-group loop (zero point and bound terms, NG / GC
#: trips after the whole K loop: 5 at K = 5120). 1 = not pipelined. The pipeliner's default (the
#: launch's num_stages) prefetches [BN, GC] scale / zero tiles and [BM, GC] x statistics across
#: trips: offline sm_90 at K = 5120 (scripts/certified_offline.py --dispatch) that cost 220 -> 141
#: registers at BM = 16 and spilled 416-488 bytes at BM = 32 / 64 (none with 1), for a loop with
#: nothing to hide behind. 0 restores the launch's num_stages (for an A/B timing on the GPU).
EPILOGUE_STAGES = 1


# Launch configurations per M band: (BM, num_warps, num_stages, BK, VARIANT). BM = 1 is a GEMV
# (no tl.dot); BM > 1 pads M to BM for tl.dot with the decoded weight tile as the A operand. M > 64
# loops over M tiles of 64 (the weight is then read ceil(M/64) times). BK = 0: the largest power
# of two <= 64 dividing the group (see _bk). VARIANT (INTx only; other kinds, and shapes a
# variant cannot take, fall back to 0): 0 = the byte path (the previous kernel: GEMV with
# shift-and-mask per byte, int->float convert, fp32 FMA into [BN, BK]; or the byte dot path);
# GEMV: 1 = word GEMV (int32 loads, exponent-trick decode, group scale once per word,
# _words_step), 2 = 1 with two K steps loaded before use, 4 = word GEMV keeping the exact offset
# 2^bits (float 2^bits + q: shift, and-or, FMA; the offset goes into the zero point like the bf16
# decode's 128); dot path (INT2 / INT4, BK = 64): 3 = word-dot (_words_dot_step: two and-or ops
# per plane decode a word into bf16 pairs). Chosen on the H200 with scripts/tune_draft_head.py
# (124160 x 5120, g64, block 128, 2026-11-29; docs/draft_head.md):
# M = 1: word GEMV — in-graph profile INT2 (1, 8, 3, 0, 2) 203 us vs the byte GEMV's 231 us
#   (INT4 (1, 16, 3, 0, 4) ~212 us vs 237); the eager per-call sweep is CPU-launch-bound there
#   (~300 us for every good config), so the choice among word variants is not resolved.
#   INT8: byte GEMV 551 us vs word 547 (variant 4) / 648 (variant 1), eager: kept on the byte path.
# M = 16 / 64: the word-dot lost (M=16: 529-712 us vs byte dot 421 / 441; M=64: 1037-1459 vs
#   690 / 863, eager, INT2 / INT4): the byte dot path stays.
# Previous table: {1: (1, 8, 3, 0, 0), 16: (16, 4, 3, 0, 0), 32: (32, 4, 3, 0, 0), 64: (64, 8, 4, 0, 0)}
_CONFIGS = {1: (1, 8, 3, 0, 2), 16: (16, 4, 3, 0, 0), 32: (32, 4, 3, 0, 0), 64: (64, 8, 4, 0, 0)}


# Per (band, bits) overrides of _CONFIGS (INTx bits; None = native FP8 / NVFP4 rows).
_CONFIGS_BITS: dict = {(1, 4): (1, 16, 3, 0, 4), (1, 8): (1, 8, 3, 0, 0)}


# Fast mode only (no bound: the keys are the coarse logits), per (band, INTx bits), checked before
# the tables above. VARIANTS 7-10 = the packed-half GEMV (triton_h2.py: fp16-pair decode + FMA,
# the next K step's words in flight; H2_VARIANTS below); its fp16 rounding is outside the
# certified bound's proof, so certified keys never use it. Chosen on the H200 with
# scripts/tune_draft_head.py (124160 x 5120, g64, block 128, CUDA-graph replay, 2026-12-01):
# the wide GEMV (9) at 8 warps — coarse kernel INT2 109.6 us in-graph profile (the word GEMV:
# 202 us), INT4 ~171-189 (210), INT8 ~300 (316); one thread per row (5, 6) 196-230 us:
# scripts/probe_stream.py shows that tiling alone caps the read at ~2.3 TB/s, four threads per
# row at 8 warps reads at 3.9 TB/s (a flat read: 4.0).
_CONFIGS_FAST: dict = {(1, 2): (1, 8, 1, 0, 9), (1, 4): (1, 8, 1, 0, 9), (1, 8): (1, 8, 1, 0, 9)}


#: packed-half GEMV variants -> (WIDE: the wide step, g64 and coarser groups only, else the split
#: step; CG: .cg word loads). Variants 5 / 6 (one thread per row) measured 196-413 us on the
#: H200 (slower than 7-10 at every bits) and were removed.
H2_VARIANTS = {7: (False, True), 8: (False, False), 9: (True, True), 10: (True, False)}


def _config(m: int, bits=None, fast: bool = False):
    band = 64
    for b in (1, 16, 32, 64):
        if m <= b:
            band = b
            break
    if fast and (band, bits) in _CONFIGS_FAST:
        return band, _CONFIGS_FAST[band, bits]
    return band, _CONFIGS_BITS.get((band, bits), _CONFIGS[band])


#: Bytes a step of NVFP4 rows on the tensor-core (BM > 1) path. 64 spilled on sm_90 (255 registers:
#: 72 / 376 / 40 bytes at BM = 16 / 32 / 64 on 124160 x 5120, 88 / 376 / 16 on 49152 x 576; 152-160
#: local loads / stores a loop step at BM = 32); 32 does not (165 / 246 / 190 registers) for 31.0 /
#: 31.7 / 19.2 loop instructions a byte of a row against 29.8 / 33.8 / 19.1 (offline:
#: scripts/band_loop_offline.py, docs/measurements/2026-12-05_session36_band_offline.log). Not yet timed.
NVFP4_DOT_BK = 32


def _bk(kind: int, group_size: int, dot: bool = False) -> int:
    """Bytes per plane per step: a power of two dividing the INTx group (so a step never
    straddles two groups), at most 64; NVFP4 rows on the dot path ``NVFP4_DOT_BK``."""
    if kind == KIND_INTX:
        bk = 64
        while group_size % bk:
            bk //= 2
        return bk
    return NVFP4_DOT_BK if kind == KIND_NVFP4 and dot else 64


def kernel_depth(padded_k: int, bk: int, group_size: int) -> int:
    """Summation depth of the kernel's fp32 accumulation: a BK-long dot (or final row sum) per
    plane-step, up to 4 roundings per plane-step on the accumulator (product, scale, add), the
    G-long x statistics and the NG-long zero-point / bound dots: BK + 4 steps + G + NG + 16."""
    steps = -(-padded_k // bk)
    return bk + 4 * steps + group_size + padded_k // group_size + 16


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


def coarse_head_triton(x, kind, w, s, z, gs, *, n, bits, group_size, padded_k, block, kcand, bound,
                       sigma, write_logits, config=None):
    """Launch the coarse kernel. Tensors as stored (see ``coarse_head._raw``): INTx packed / scale
    fp16 / zero; FP8 data viewed as uint8 / row scale fp32; NVFP4 packed / scale viewed as uint8 /
    global scale. ``config`` = (BM, num_warps, num_stages, BK[, VARIANT]) overrides the M-band
    table (for tuning; BK = 0: the default for the group). Returns the six :class:`CoarseOut` tensors, all fresh (nothing is mutated)."""
    m, k = x.shape
    if x.stride(1) != 1:
        x = x.contiguous()
    # int8 wgmma: CoarsePacking.wgmma_table's int32 words or wgmma_words' uint8 buffer of scales and zeros
    if kind == KIND_INTX and w.dim() == 2 and (s.dtype == torch.int32 or (s.dtype == torch.uint8 and s.dim() == 1)):
        from lowbit.ops.coarse_head.gluon_wgmma import coarse_wgmma

        return coarse_wgmma(x, w, s, n=n, bits=bits, block=block, kcand=kcand, write_logits=write_logits,
                            table_r=z if z.dtype == torch.float32 else None)
    if kind == KIND_INTX and w.dim() == 5 and s.dtype == torch.int32:  # CoarsePacking.mma_tiled: tensor cores
        from lowbit.ops.coarse_head.triton_mma import coarse_mma

        return coarse_mma(x, w, s, n=n, ell=padded_k // (8 // bits), bits=bits, group_size=group_size, block=block,
                          kcand=kcand, write_logits=write_logits, bound=bound)
    if config is None:
        _, config = _config(m, bits if kind == KIND_INTX else None, fast=bound == BOUND_NONE)
    bm, warps, stages, bk = config[:4]
    variant = config[4] if len(config) > 4 else 0
    use_dot = bm > 1
    if not bk:
        bk = _bk(kind, group_size, use_dot)
    aligned = (kind == KIND_INTX and group_size % bk == 0 and w.shape[1] % 4 == 0 and w.stride(1) == 1
               and w.stride(0) % 4 == 0 and w.data_ptr() % 16 == 0)
    if variant in H2_VARIANTS and not use_dot and aligned and bound == BOUND_NONE:
        from lowbit.ops.coarse_head.triton_h2 import coarse_gemv_h2

        wide, cg = H2_VARIANTS[variant]
        return coarse_gemv_h2(x, w, s, z, n=n, bits=bits, group_size=group_size, block=block, kcand=kcand,
                              write_logits=write_logits, num_warps=warps, num_stages=stages, wide=wide, cg=cg)
    if variant in H2_VARIANTS:  # certified keys (fp32 rounding proof) or an unaligned view: the word GEMV
        variant = 2
    if use_dot:  # word-dot: INT2 / INT4, BK = 64 (K = 16 per sub-dot)
        words = variant == 3 and aligned and bits is not None and bits <= 4 and bk == 64
    else:
        words = variant in (1, 2, 4) and aligned and bk % 16 == 0
    offs = words and variant == 4
    ell = w.shape[1]  # bytes per row (L)
    if words:
        w = w.view(torch.int32)  # [N, L / 4]: stride(0) now in words
    if interpret_mode():
        dt, split = tl.float32, False  # the interpreter's bf16 tl.dot is broken; fp32 is exact here
    else:
        dt = tl.float16 if x.dtype == torch.float16 else tl.bfloat16
        split = use_dot and x.dtype == torch.float32
    nb = -(-n // block)
    depth = kernel_depth(padded_k, bk, group_size)
    magic = use_dot and kind == KIND_INTX and bits <= 4 and dt == tl.bfloat16
    if kind == KIND_INTX:
        p, shift, mask = 8 // bits, bits, (1 << bits) - 1
        # the magic bf16 decode computes with codes q + 128, the offset word-GEMV with q + 2^bits:
        # the rounding slack scales with that
        zoff = 128.0 if magic else (float(2**bits) if offs else 0.0)
        bcoef = 0.5 * (1.0 + rounding_eps(bits, depth, split, offset=int(zoff)))
    elif kind == KIND_FP8:
        p, shift, mask = 1, 0, 0xFF
        bcoef = rounding_eps(None, depth, split)
    else:
        p, shift, mask = 2, 4, 0xF
        bcoef = rounding_eps(None, depth, split)
    dev = x.device
    ng = s.shape[1] if kind == KIND_INTX else 1
    stats = torch.empty(3, m if kind == KIND_INTX else 0, ng, dtype=torch.float32, device=dev)
    if kind == KIND_INTX:
        _x_stats_kernel[(m, _cdiv(ng, 16))](x, stats, m, x.stride(0), K=k, NG=ng, G=group_size,
                                                   GP=_pow2(group_size), GC=16,
                                                   num_warps=4)
    certified = bound != BOUND_NONE
    cand_key, cand_lb, cand_idx, block_lb, block_rest, logits = coarse_outputs(m, n, nb, kcand, certified,
                                                                              write_logits, dev)
    grid = (nb, _cdiv(m, bm))
    _coarse_head_kernel[grid](
        x, stats, w, s, z, gs,
        cand_key, cand_lb, cand_idx, block_lb, block_rest, logits,
        m, n, nb,
        x.stride(0), w.stride(0), s.stride(0),
        float(bcoef), float(sigma), ABS_SLACK,
        K=k, L=ell, NG=ng, KIND=kind, P=p, SHIFT=shift, MASK=mask, G=group_size,
        BM=bm, BN=block, BK=bk, KCAND=kcand, GC=16,
        BOUND=bound, USE_DOT=use_dot, SPLIT=split,
        DT=dt, MAGIC=magic, ZOFF=zoff if kind == KIND_INTX else 0.0,
        WRITE_LOGITS=write_logits, WORDS=words, UNROLL=2 if variant == 2 else 1, OFFS=offs,
        EPI_STAGES=EPILOGUE_STAGES or stages,
        num_warps=warps, num_stages=stages,
    )
    return cand_key, cand_lb, cand_idx, block_lb, block_rest, logits


__all__ = ["coarse_head_triton", "kernel_depth"]
