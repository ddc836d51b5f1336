"""The fp32 coarse kernel of the draft head: decode, dot, bound, per-block candidates.

One program owns ``BN`` consecutive tokens (one candidate block) and ``BM`` rows of x. It streams
its rows of the coarse weight once, keeps the coarse logits ``acc [BM, BN]`` (and the bound
accumulator ``bnd``) in fp32 registers, and emits the block's top-``KCAND`` by successive
max-and-mask — no [M, N] logits are written unless asked, and no full-row top-k pass exists.
Serves every packing kind (INTx, FP8 rows, NVFP4 rows) and every bound; its fp32 rounding is
what the certified bound's proof covers (:func:`~lowbit.ops.coarse_head.reference.rounding_eps`).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from lowbit._backend import interpret_mode
from lowbit.ops.coarse_head.epilogue import block_epilogue, cdiv, coarse_outputs, pow2
from lowbit.ops.coarse_head.packing import KIND_FP8, KIND_INTX, KIND_NVFP4
from lowbit.ops.coarse_head.reference import ABS_SLACK, BOUND_NONE, rounding_eps


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
):
    i_n = tl.program_id(0).to(tl.int64)
    i_m = tl.program_id(1).to(tl.int64)
    o_n = i_n * BN + tl.arange(0, BN)
    o_m = i_m * BM + tl.arange(0, BM)
    o_b = tl.arange(0, BK)
    m_n = o_n < N
    m_m = o_m < M
    p_w = w_ptr + o_n[:, None] * stride_wn + o_b[None, :]

    if WORDS:
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
    block_epilogue(acc, bnd, st_ptr, s_ptr, z_ptr, gs_ptr, ck_ptr, clb_ptr, ci_ptr, blb_ptr, brest_ptr, lg_ptr,
                   o_m, m_m, o_n, m_n, i_n, M, N, NB, stride_sn, bcoef, sigma, abs_slack,
                   NG, KIND, BOUND, USE_DOT, ZOFF, WRITE_LOGITS, KCAND, GC, BN)


@dataclass(frozen=True)
class Fp32Config:
    """One launch configuration of :func:`coarse_fp32`.

    ``bm`` rows of x a program (1: a GEMV with fp32 FMAs; > 1: ``tl.dot`` with the decoded weight
    tile as the A operand, M padded to ``bm``); ``warps`` / ``stages`` as launched; ``bk`` bytes a
    plane-step (0: the largest power of two <= 64 dividing the group, see :func:`step_bytes`);
    ``step`` the GEMV's K step on INTx codes: ``"bytes"`` (shift and mask a byte, int -> float),
    ``"words2"`` (int32 words, exponent-trick decode, the group scale once a word, two steps in
    flight) or ``"words_offset"`` (int32 words decoded as the exact float ``2^bits + q``, the offset
    folded into the zero point). Word steps need an aligned INTx copy; otherwise bytes.
    """

    bm: int
    warps: int
    stages: int
    bk: int = 0
    step: str = "bytes"


#: M band -> configuration (any kind); ``CONFIGS_BITS`` overrides it per (band, INTx bits). Chosen
#: on the H200 with the coarse-pass tuner (``lowbit tune coarse_head``; 124160 x 5120, g64, block 128;
#: docs/draft_head.md): at M = 1 the word GEMV beats the byte GEMV for INT2 / INT4 (~203 / ~212 vs
#: 231 / 237 us in-graph), INT8 stays on bytes; from M = 16 the byte dot path.
CONFIGS = {1: Fp32Config(1, 8, 3, 0, "words2"), 16: Fp32Config(16, 4, 3), 32: Fp32Config(32, 4, 3),
           64: Fp32Config(64, 8, 4)}
CONFIGS_BITS = {(1, 4): Fp32Config(1, 16, 3, 0, "words_offset"), (1, 8): Fp32Config(1, 8, 3)}
#: the M bands of :data:`CONFIGS`; M > 64 loops over M tiles of 64 (the weight read ceil(M / 64) times)
M_BANDS = (1, 16, 32, 64)


def m_band(m: int) -> int:
    """The smallest band of :data:`M_BANDS` holding ``m`` rows (64 beyond)."""
    return next((b for b in M_BANDS if m <= b), M_BANDS[-1])


def fp32_config(m: int, bits: int | None) -> Fp32Config:
    """The table's configuration for ``m`` rows over an INTx copy of ``bits`` (None: native rows)."""
    band = m_band(m)
    return CONFIGS_BITS.get((band, bits), CONFIGS[band])


#: Bytes a step of NVFP4 rows on the dot (BM > 1) path: 64 spills on sm_90 (255 registers,
#: 40-376 bytes at BM = 16 / 32 / 64), 32 does not, and 32 is faster at every M band on both
#: benchmark heads but one (docs/design-notes.md).
NVFP4_DOT_BK = 32


def step_bytes(kind: int, group_size: int, dot: bool = False) -> int:
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


def coarse_fp32(x, kind, w, s, z, gs, *, n, bits, group_size, padded_k, block, kcand, bound, sigma,
                write_logits, config: Fp32Config):
    """Launch the fp32 coarse kernel (any kind, any bound). Tensors as stored (see
    :func:`~lowbit.ops.coarse_head.packing.raw_tensors`): INTx packed / scale fp16 / zero; FP8 data
    viewed as uint8 / row scale fp32; NVFP4 packed / scale viewed as uint8 / global scale.
    Returns the six :class:`CoarseOut` tensors, all fresh (nothing is mutated)."""
    m, k = x.shape
    if x.stride(1) != 1:
        x = x.contiguous()
    bm, warps, stages, bk = config.bm, config.warps, config.stages, config.bk
    use_dot = bm > 1
    if not bk:
        bk = step_bytes(kind, group_size, use_dot)
    aligned = (kind == KIND_INTX and group_size % bk == 0 and w.shape[1] % 4 == 0 and w.stride(1) == 1
               and w.stride(0) % 4 == 0 and w.data_ptr() % 16 == 0)
    words = not use_dot and config.step != "bytes" and aligned and bk % 16 == 0
    offs = words and config.step == "words_offset"
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
        _x_stats_kernel[(m, cdiv(ng, 16))](x, stats, m, x.stride(0), K=k, NG=ng, G=group_size,
                                           GP=pow2(group_size), GC=16, num_warps=4)
    certified = bound != BOUND_NONE
    cand_key, cand_lb, cand_idx, block_lb, block_rest, logits = coarse_outputs(m, n, nb, kcand, certified,
                                                                              write_logits, dev)
    grid = (nb, cdiv(m, bm))
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
        WRITE_LOGITS=write_logits, WORDS=words, UNROLL=2 if config.step == "words2" else 1, OFFS=offs,
        num_warps=warps, num_stages=stages,
    )
    return cand_key, cand_lb, cand_idx, block_lb, block_rest, logits


__all__ = ["CONFIGS", "CONFIGS_BITS", "Fp32Config", "M_BANDS", "coarse_fp32", "fp32_config", "kernel_depth", "m_band",
           "step_bytes"]
