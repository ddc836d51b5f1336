"""Packed-half GEMV of the coarse pass (INTx, fast mode, one row of x per program).

Why a second GEMV: the fp32 word GEMV (``coarse_fp32.py``) spends a shift, an and-or
and an fp32 FMA on every code and waits for each K step's load before computing it, so it runs
near 0.9 TB/s on the H200. This kernel halves the arithmetic with paired fp16 math and keeps
the next step's load in flight while it computes the current one:

* a code pair is decoded by one and-or into two fp16 values ``1024 + q 2^(SHIFT j)`` (the code's
  bits land in the fp16 mantissa: ``0x6400`` is 1024.0 with a zero mantissa); ``sub.f16x2``
  with ``1024 + z 2^(SHIFT j)`` (built once per row and group from the zero point) leaves
  ``(q - z) 2^(SHIFT j)`` exactly, and ``fma.rn.f16x2`` multiplies by the matching pair of x
  values and accumulates — three instructions per two codes (inline PTX; emulated with fp16
  tensor arithmetic under the interpreter). The zero point is thus applied per element, exactly,
  and no per-group statistics of x are needed;
* x is prepared once per call (``_x_pairs_kernel``) as packed fp16 pairs in the order the
  decode produces codes, pre-scaled by ``alpha 2^-(SHIFT j)``: ``alpha`` is a power of two per
  row of x that keeps every fp16 partial sum far from overflow, ``2^-(SHIFT j)`` undoes plane
  j's code position;
* four threads share a row and each holds one 16-byte vector of it per K step (a warp's load
  reads 8 rows x 64 contiguous bytes: one thread per row, 32 rows x 16 bytes, caps the read
  near 2.3 TB/s on the H200);
* the fp16 pairs of one (row, plane, vector) — 8 products per half — are widened to fp32 and
  multiplied by the group scale once per K step; the candidates and the logits are the shared
  epilogue of ``epilogue.py``.

Two forms of the step (``WIDE``): the *wide* one (g64 and coarser groups) decodes the [BN, 16]
word tile in place and sums a thread's four words in fp16; the *split* one (any group size)
splits the tile into its four words first, which Triton pays for with a layout conversion
through shared memory in every step.

The fp16 products and 8-term sums round at 2^-11 relative, far below the 2-/4-/8-bit coarse
error itself, so this is a fast-mode kernel only: the certified bound's rounding proof covers
the fp32 kernels, not this one.

Layout read (see :class:`lowbit.formats.INTx`): ``packed`` viewed as int32 words ``[N, L/4]``;
word t of a row holds bytes 4t..4t+3, and byte b's field i (bits ``[i SHIFT, (i+1) SHIFT)``) is
element ``k = i L + 4t + b``. Pairs: bytes (0, 2) are the two fp16 halves of ``w & mask``,
bytes (1, 3) those of ``(w >> 8) & mask``.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from lowbit._backend import interpret_mode

from lowbit.ops._lanes import half_pair as _half_pair
from lowbit.ops._lanes import pack_halves as _pack_halves
from lowbit.ops.coarse_head.epilogue import KIND_DONE, block_epilogue, coarse_outputs

#: fp16 1024.0 in both halves of a word: the decode's magic and its exact offset
_MAGIC = 0x64006400
#: words per row per K step: four 16-byte vectors (64 bytes per plane: one g64 group)
_STEP_WORDS = 16


@triton.jit
def _h2_fma(acc, w, mask, zero, x2, INTERPRET: tl.constexpr):
    """``acc += (code - zero) * x2`` on fp16 pairs packed in int32, ``code = (w & mask) |
    0x64006400`` (two fp16 ``1024 + q 2^e``), ``zero`` the pair ``1024 + z 2^e`` (so the
    difference ``(q - z) 2^e`` is exact), ``x2`` the pair of x values, ``acc`` the partial sums.
    ``mask`` is passed as a register so that the and-or is one LOP3 (with both constants as
    immediates ptxas emits two)."""
    if INTERPRET:
        code = (w & mask) | 0x64006400
        c_lo, c_hi = _half_pair(code)
        z_lo, z_hi = _half_pair(zero)
        x_lo, x_hi = _half_pair(x2)
        a_lo, a_hi = _half_pair(acc)
        # fp16 rounding after the multiply and after the add (the GPU rounds once, in the fma)
        p_lo = ((c_lo - z_lo) * x_lo).to(tl.float16).to(tl.float32)
        p_hi = ((c_hi - z_hi) * x_hi).to(tl.float16).to(tl.float32)
        return _pack_halves(a_lo + p_lo, a_hi + p_hi)
    else:
        return tl.inline_asm_elementwise(
            "{ .reg .b32 t; lop3.b32 t, $2, $3, 0x64006400, 0xEA; sub.f16x2 t, t, $4; fma.rn.f16x2 $0, t, $5, $1; }",
            "=r,r,r,r,r,r", [acc, w, mask, zero, x2], dtype=tl.int32, is_pure=True, pack=1)


@triton.jit
def _h2_add(a, b, INTERPRET: tl.constexpr):
    """Pairwise fp16 sum of two int32-packed fp16 pairs."""
    if INTERPRET:
        a_lo, a_hi = _half_pair(a)
        b_lo, b_hi = _half_pair(b)
        return _pack_halves(a_lo + b_lo, a_hi + b_hi)
    else:
        return tl.inline_asm_elementwise("add.rn.f16x2 $0, $1, $2;", "=r,r,r", [a, b], dtype=tl.int32,
                                         is_pure=True, pack=1)


@triton.jit
def _h2_sum(acc, INTERPRET: tl.constexpr):
    """fp32 sum of the two fp16 halves of ``acc`` (int32)."""
    if INTERPRET:
        lo, hi = _half_pair(acc)
        return lo + hi
    else:
        bits = tl.inline_asm_elementwise(
            "{ .reg .b16 l, h; .reg .f32 a, b; mov.b32 {l, h}, $1; cvt.f32.f16 a, l; cvt.f32.f16 b, h; "
            "add.f32 a, a, b; mov.b32 $0, a; }",
            "=r,r", [acc], dtype=tl.int32, is_pure=True, pack=1)
        return bits.to(tl.float32, bitcast=True)


@triton.jit
def _x_pairs_kernel(x_ptr, x2_ptr, alpha_ptr, stride_xm,
                    K: tl.constexpr, L: tl.constexpr, LW: tl.constexpr, NS: tl.constexpr, P: tl.constexpr,
                    SHIFT: tl.constexpr, LIMIT: tl.constexpr, BLK: tl.constexpr, WIDE: tl.constexpr = False):
    """One program per row m of x [M, K]: ``alpha[m]`` (fp32 power of two, ``amax |x| alpha`` in
    ``(LIMIT/2, LIMIT]``) and ``x2[m]`` int32 ``[P, NS, 4 (i), 2 (h), 4 (u)]``: for plane j, K
    step s, word ``t = 16 s + 4 u + i`` of the step, byte pair h, the fp16 pair
    ``(x[k], x[k + 2]) * alpha * 2^-(SHIFT j)`` with ``k = j L + 4 t + h`` (zero past K and past
    the plane's LW words): the split step's order, the four u of one (j, s, i, h) contiguous.
    ``WIDE``: ``[P, NS, 2 (h), 16 (word of the step)]`` instead (the wide step loads the 16
    words' pairs of one h at once)."""
    i_m = tl.program_id(0).to(tl.int64)
    p_x = x_ptr + i_m * stride_xm
    b_amax = tl.zeros([BLK], dtype=tl.float32)
    for k0 in range(0, K, BLK):
        o_k = k0 + tl.arange(0, BLK)
        b_amax = tl.maximum(b_amax, tl.abs(tl.load(p_x + o_k, mask=o_k < K, other=0.0).to(tl.float32)))
    amax = tl.max(b_amax, axis=0)
    # the largest power of two <= LIMIT / amax, from the exponent bits (exact); 1 for a zero row
    ratio = LIMIT / tl.maximum(amax, 1e-30)
    alpha = (ratio.to(tl.int32, bitcast=True) & 0x7F800000).to(tl.float32, bitcast=True)
    alpha = tl.where(amax > 0.0, alpha, 1.0)
    tl.store(alpha_ptr + i_m, alpha)
    TOT: tl.constexpr = P * NS * 32
    for o0 in range(0, TOT, BLK):
        o = o0 + tl.arange(0, BLK)
        j = tl.minimum(o // (NS * 32), P - 1)  # clamped on the masked tail: no stray exponents
        if WIDE:
            t = 16 * ((o // 32) % NS) + o % 16
            h = (o // 16) % 2
        else:
            t = 16 * ((o // 32) % NS) + 4 * (o % 4) + (o // 8) % 4
            h = (o // 4) % 2
        k = j * L + 4 * t + h
        m_o = o < TOT
        m_t = m_o & (t < LW)  # entries past the plane's words are written as zeros
        x_a = tl.load(p_x + k, mask=m_t & (k < K), other=0.0).to(tl.float32)
        x_b = tl.load(p_x + k + 2, mask=m_t & (k + 2 < K), other=0.0).to(tl.float32)
        # alpha * 2^-(SHIFT j), an exact power of two built from its exponent
        f = alpha * ((127 - SHIFT * j) << 23).to(tl.float32, bitcast=True)
        tl.store(x2_ptr + i_m * TOT + o, _pack_halves(x_a * f, x_b * f), mask=m_o)


@triton.jit
def _split_plane_step(acc, w0, w1, w2, w3, p_x2, s_ptr, z_ptr, o_n, m_n, o_u, j0, stride_sn, j: tl.constexpr,
                      L: tl.constexpr, LW: tl.constexpr, SHIFT: tl.constexpr, MASK: tl.constexpr,
                      G: tl.constexpr, INTERPRET: tl.constexpr):
    """Plane ``j`` of one K step, split form (any group size): words ``w0..w3`` [BN, 4] are
    words ``j0 + 4u + i`` (i = 0..3) of each row; 8 fp16-pair products per (row, u), widened
    per (row, u), times the group of vector u: ``acc`` [BN, 4]."""
    M2: tl.constexpr = (MASK << (SHIFT * j)) * 0x10001
    # the group of each 16-byte vector (G is a multiple of 16: a vector never straddles groups)
    o_g = (j * L + 4 * (j0 + 4 * o_u)) // G  # [4]
    p_g = o_n[:, None] * stride_sn + o_g[None, :]  # [BN, 4]
    # vectors past the plane's LW words (a partial last step) read no group: z = s = 0 there
    m_g = m_n[:, None] & ((j0 + 4 * o_u) < LW)[None, :]
    b_z = tl.load(z_ptr + p_g, mask=m_g, other=0).to(tl.int32)
    zero = (0x6400 | (b_z << (SHIFT * j))) * 0x10001  # fp16 pair 1024 + z 2^(SHIFT j)
    a16 = tl.zeros(w0.shape, dtype=tl.int32)
    mask = tl.full(w0.shape, M2, tl.int32)
    for i in tl.static_range(4):
        if i == 0:
            w = w0
        elif i == 1:
            w = w1
        elif i == 2:
            w = w2
        else:
            w = w3
        # [4] x pairs of words j0 + 4u + i (p_x2: this plane and step), bytes (0, 2) then (1, 3)
        x_a = tl.load(p_x2 + 8 * i + o_u)
        x_b = tl.load(p_x2 + 8 * i + 4 + o_u)
        a16 = _h2_fma(a16, w, mask, zero, x_a[None, :], INTERPRET)
        a16 = _h2_fma(a16, w >> 8, mask, zero, x_b[None, :], INTERPRET)
    b_sc = tl.load(s_ptr + p_g, mask=m_g, other=0.0).to(tl.float32)
    return acc + _h2_sum(a16, INTERPRET) * b_sc


@triton.jit
def _wide_plane_step(acc, b_w, b_wh, p_x2, s_ptr, z_ptr, o_n, m_n, j0, stride_sn, j: tl.constexpr,
                     L: tl.constexpr, SHIFT: tl.constexpr, MASK: tl.constexpr, G: tl.constexpr, BN: tl.constexpr,
                     INTERPRET: tl.constexpr):
    """Plane ``j`` of one K step, wide form (G % 64 == 0: the step is one group of each row): ``b_w`` / ``b_wh = b_w >> 8``
    int32 [BN, 16] as loaded (each thread holds 4 consecutive words of a row); the pairs are
    decoded and multiplied in place, the 4 words of a thread summed in fp16 (8 products per
    half), widened, times the row's group scale: ``acc`` [BN, 4]."""
    M2: tl.constexpr = (MASK << (SHIFT * j)) * 0x10001
    p_g = o_n * stride_sn + (j * L + 4 * j0) // G  # [BN]
    b_z = tl.load(z_ptr + p_g, mask=m_n, other=0).to(tl.int32)
    zero = ((0x6400 | (b_z << (SHIFT * j))) * 0x10001)[:, None]  # fp16 pair 1024 + z 2^(SHIFT j)
    mask = tl.full(b_w.shape, M2, tl.int32)
    o_t = tl.arange(0, 16)
    x_a = tl.load(p_x2 + o_t)[None, :]  # [1, 16] bytes (0, 2) of the step's 16 words
    x_b = tl.load(p_x2 + 16 + o_t)[None, :]  # bytes (1, 3)
    a16 = _h2_fma(tl.zeros(b_w.shape, dtype=tl.int32), b_w, mask, zero, x_a, INTERPRET)
    a16 = _h2_fma(a16, b_wh, mask, zero, x_b, INTERPRET)
    a, b = tl.split(tl.reshape(a16, [BN, 8, 2]))
    a, b = tl.split(tl.reshape(_h2_add(a, b, INTERPRET), [BN, 4, 2]))
    b_sc = tl.load(s_ptr + p_g, mask=m_n, other=0.0).to(tl.float32)
    return acc + _h2_sum(_h2_add(a, b, INTERPRET), INTERPRET) * b_sc[:, None]


@triton.jit
def _coarse_gemv_h2_kernel(
    x2_ptr, alpha_ptr, w_ptr, s_ptr, z_ptr,
    ck_ptr, ci_ptr, lg_ptr,
    M, N, NB, stride_wn, stride_sn,
    L: tl.constexpr, LW: tl.constexpr, NS: tl.constexpr, NG: tl.constexpr, P: tl.constexpr, SHIFT: tl.constexpr,
    MASK: tl.constexpr, G: tl.constexpr, BN: tl.constexpr, KCAND: tl.constexpr,
    WRITE_LOGITS: tl.constexpr, WIDE: tl.constexpr, INTERPRET: tl.constexpr,
):
    """Grid (ceil(N / BN), M). Per program: BN tokens of one row of x; 16 words per row per K
    step as a [BN, 16] tile (four threads per row), the next step's tile loaded before this one
    is decoded. Outputs as the main coarse kernel's fast mode (candidates, optional logits).
    ``WIDE`` (G % 64 == 0 only): the wide step, else the split one. The word loads bypass L1
    (``.cg``): they are streamed once, and L1 keeps the x pairs and scale lines instead."""
    i_n = tl.program_id(0).to(tl.int64)
    i_m = tl.program_id(1).to(tl.int64)
    o_n = i_n * BN + tl.arange(0, BN)
    m_n = o_n < N
    o_u = tl.arange(0, 4)
    o_w = tl.arange(0, 16)[None, :]  # [1, 16]
    p_w = w_ptr + o_n[:, None] * stride_wn + o_w
    m_w = m_n[:, None]
    p_x2 = x2_ptr + i_m * (P * NS * 32)
    acc = tl.zeros([BN, 4], dtype=tl.float32)
    b_next = tl.load(p_w, mask=m_w & (o_w < LW), other=0, cache_modifier=".cg")
    for i_s in range(0, NS):
        j0 = 16 * i_s
        b_cur = b_next
        b_next = tl.load(p_w + j0 + 16, mask=m_w & (j0 + 16 + o_w < LW), other=0, cache_modifier=".cg")
        if WIDE:
            b_h = b_cur >> 8
            for j in tl.static_range(P):
                acc = _wide_plane_step(acc, b_cur, b_h, p_x2 + (j * NS + i_s) * 32, s_ptr, z_ptr, o_n, m_n, j0,
                                       stride_sn, j, L, SHIFT, MASK, G, BN, INTERPRET)
        else:
            b_e, b_o = tl.split(tl.reshape(b_cur, [BN, 4, 2, 2]))  # words i even / odd: [BN, 4, 2]
            w0, w2 = tl.split(b_e)
            w1, w3 = tl.split(b_o)
            for j in tl.static_range(P):
                acc = _split_plane_step(acc, w0, w1, w2, w3, p_x2 + (j * NS + i_s) * 32, s_ptr, z_ptr, o_n, m_n,
                                        o_u, j0, stride_sn, j, L, LW, SHIFT, MASK, G, INTERPRET)
    alpha = tl.load(alpha_ptr + i_m)
    row = (tl.sum(acc, axis=1) / alpha)[None, :]  # [1, BN]
    o_m = i_m + tl.arange(0, 1)
    block_epilogue(row, row, s_ptr, s_ptr, z_ptr, s_ptr, ck_ptr, ck_ptr, ci_ptr, ck_ptr, ck_ptr, lg_ptr,
                   o_m, o_m < M, o_n, m_n, i_n, M, N, NB, stride_sn, 0.0, 0.0, 0.0,
                   NG, KIND_DONE, 0, False, 0.0, WRITE_LOGITS, KCAND, 16, BN)


def _limit(bits: int) -> float:
    """``amax |x| alpha`` is kept in ``(LIMIT/2, LIMIT]``: a product is then at most
    ``qmax LIMIT = 512`` and a half's partial sum (8 products) at most 4096 (fp16 max: 65504)."""
    return 512.0 / ((1 << bits) - 1)


def coarse_gemv_half2(x, w, s, z, *, n, bits, group_size, block, kcand, write_logits, num_warps=8, num_stages=1):
    """Launch the packed-half GEMV (fast mode). ``x`` [M, K] (unit stride along K), ``w`` the INTx
    plane-split codes uint8 [N, L] (L % 4 == 0, 16-byte aligned rows), ``s`` fp16 / ``z`` uint8
    [N, NG]. The wide step serves ``group_size % 64 == 0``, the split step any group. Returns the
    six ``CoarseOut`` tensors (certified outputs empty)."""
    m, k = x.shape
    wide = group_size % 64 == 0
    ell = w.shape[1]
    lw = ell // 4
    p = 8 // bits
    dev = x.device
    ns = -(-lw // _STEP_WORDS)
    x2 = torch.empty(m, p * ns * 32, dtype=torch.int32, device=dev)
    alpha = torch.empty(m, dtype=torch.float32, device=dev)
    _x_pairs_kernel[(m,)](x, x2, alpha, x.stride(0), K=k, L=ell, LW=lw, NS=ns, P=p, SHIFT=bits,
                          LIMIT=_limit(bits), BLK=1024, WIDE=wide, num_warps=4)
    nb = -(-n // block)
    outs = coarse_outputs(m, n, nb, kcand, False, write_logits, dev)
    cand_key, _, cand_idx, _, _, logits = outs
    wq = w.view(torch.int32)
    _coarse_gemv_h2_kernel[(nb, m)](
        x2, alpha, wq, s, z, cand_key, cand_idx, logits,
        m, n, nb, wq.stride(0), s.stride(0),
        L=ell, LW=lw, NS=ns, NG=s.shape[1], P=p, SHIFT=bits, MASK=(1 << bits) - 1, G=group_size, BN=block,
        KCAND=kcand, WRITE_LOGITS=write_logits, WIDE=wide, INTERPRET=interpret_mode(),
        num_warps=num_warps, num_stages=num_stages,
    )
    return outs


__all__ = ["coarse_gemv_half2"]
