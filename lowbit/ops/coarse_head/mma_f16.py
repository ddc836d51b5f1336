"""Coarse pass on the tensor cores for small M (fast mode; certified mode with the deterministic
bound, see :func:`mma_bound_coef`): ``mma.sync.m16n8k16`` with the codes
decoded straight into the A fragment and the rows of x as the B fragment (``NCT`` column tiles
of 8 rows in one launch: one for M <= 8, two for M <= 16; more rows take more launches).

Why: the packed-half GEMV (``gemv_half2.py``; a re-tiled one-thread-per-row form measured at
2.2 and was dropped) spend an and-or, a pair subtract
and a pair FMA on every two codes, per row of x, and end instruction-bound near 2.2-2.9
instructions per code at M = 1 (and M times that for M rows). A tensor-core MMA takes the decoded
pairs as they come: one and-or (``lop3``) per two codes builds the fp16 pair ``1024 + q 2^e``,
one ``mma.sync`` per 256 codes of a warp multiplies them by 8 columns of x at once and
accumulates in fp32. The 1024 offset and the zero point are removed afterwards per (row,
group) from a per-(plane, step) sum of x — exact enough in fp32, which the fp16 FMA paths could
not afford. Rows of x 2..8 ride in the MMA's other columns at no extra cost; rows 9..16 cost one
more MMA per A fragment (the fragments are decoded once for both B tiles).

Fragments (PTX ``mma.m16n8k16.row.col.f32.f16.f16.f32``; lane ``L = 4 g + c``): A (16 token rows
x 16 k) ``a0 = (row g, k 2c..2c+1)``, ``a1 = (row g+8, ..)``, ``a2 = (row g, k 2c+8..2c+9)``,
``a3 = (row g+8, ..)``; B (16 k x 8 columns) ``b0 = (k 2c..2c+1, column g)``, ``b1 = (k
2c+8..2c+9, column g)``; C / D ``c0, c1 = (row g, columns 2c, 2c+1)``, ``c2, c3 = (row g+8,
..)``. The k order inside an MMA is free (A and B only have to agree): word ``4q + c`` of a row
gives, for plane j, the pair of bytes (0, 2) as k ``2c, 2c+1`` and bytes (1, 3) as k ``2c+8,
2c+9`` of chunk q. So a lane needs word ``4q + c`` of rows g and g + 8 of each 16-row tile.

Layout (:func:`mma_tile`, built once per packing): per 32-row block b and K step s (16 words of
each row), ``words[b, s, u, L, e]`` int32 with ``u = 2 t + qh`` (tile t of the block, chunk pair
qh) and ``e = 2 qi + rh``: word ``16 s + 4 (2 qh + qi) + c`` of row ``32 b + 16 t + g + 8 rh``.
A lane's 16-byte vector u holds exactly the words of its A fragments for chunks 2 qh, 2 qh + 1 of
tile t, and a warp's load of vector u is 512 contiguous bytes. Scale and zero travel as one int32
per (32-row block, group, row): fp16 scale bits | zero << 16.

K loop (``_PREFETCH_TABLE``): for INT2 / INT8 with one column tile each step's DRAM loads (code
vectors and scale-zero words, raw) are issued one step ahead, a register double buffer; elsewhere
the extra registers would cost programs per SM and the single-buffered loop is faster.

The kernel keeps the data of lane L in element L of ``[32 * warps]`` tensors (one element per
thread; every address is computed from the element index, so no layout conversion is needed);
the MMA is inline PTX, emulated with tensor arithmetic under the interpreter. After the K loop
each lane writes its token rows' logits (the ``[M, N]`` logits buffer doubles as scratch), the
program synchronizes and re-reads its block as a ``[MP, BN]`` tile for the shared candidate
epilogue.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from lowbit._backend import interpret_mode
from lowbit.ops._triton_pdl import launch_options
from lowbit.ops._lanes import half_pair as _half_pair
from lowbit.ops._lanes import mma16816_f16x2, tuple_replace, zeros_tuple
from lowbit.ops._lanes import split4 as _split4
from lowbit.ops.coarse_head.reference import ABS_SLACK, BOUND_DET, BOUND_NONE, rounding_eps
from lowbit.ops.coarse_head.epilogue import KIND_DONE, block_epilogue, coarse_outputs
from lowbit.ops.coarse_head.mma_pack import STEP_WORDS

#: fp16 1024.0 in both halves of a word: the decode's magic
_MAGIC = tl.constexpr(0x64006400)
#: rows of x one launch serves: two 8-column B tiles (more rows: more launches). The kernel
#: takes any power-of-two NCT, but four tiles measured 1.7-1.9x slower than two launches of two
#: (INT2 needs 255 registers there) and eight spill (docs/draft_head.md)
MAX_M = 16
#: K-loop schedule per (bits, column tiles): 1 issues step s + 1's loads (code vectors and
#: scale-zero words) before step s's MMAs, a register double buffer; 0 loads each step at the top of
#: its iteration. The buffer pays only where its registers cost no programs per SM: INT2 / INT8 with
#: one column tile (H200 A/B in docs/draft_head.md); INT4 and two column tiles lose with it.
_PREFETCH_TABLE = {(2, 1): 1, (8, 1): 1}


#: |x| alpha is kept <= this: x' = x alpha 2^-(SHIFT j) stays a normal fp16 for every plane
_LIMIT = tl.constexpr(4096.0)


@triton.jit
def _alpha_of(amax):
    """The largest power of two with ``amax * alpha <= _LIMIT`` (1 where amax is 0)."""
    ratio = _LIMIT / tl.maximum(amax, 1e-30)
    alpha = (ratio.to(tl.int32, bitcast=True) & 0x7F800000).to(tl.float32, bitcast=True)
    return tl.where(amax > 0.0, alpha, 1.0)


@triton.jit
def _row_alpha(x_ptr, o_r, m_r, stride_xm, K, BLK: tl.constexpr):
    """alpha of rows ``o_r`` [R]: the largest power of two with amax |x[r]| alpha <= _LIMIT (1 for a
    zero row or a row past M)."""
    o_k = tl.arange(0, BLK)
    b_amax = tl.zeros([o_r.shape[0], BLK], dtype=tl.float32)
    for k0 in range(0, K, BLK):
        kk = k0 + o_k
        b_x = tl.load(x_ptr + o_r[:, None] * stride_xm + kk[None, :], mask=m_r[:, None] & (kk < K)[None, :], other=0.0)
        b_amax = tl.maximum(b_amax, tl.abs(b_x.to(tl.float32)))
    return _alpha_of(tl.max(b_amax, axis=1))


@triton.jit(do_not_specialize=["M", "K"])
def _x_frag_kernel(x_ptr, alpha_ptr, xb_ptr, sx_ptr, sb_ptr, M, K, stride_xm,
                   L: tl.constexpr, NS: tl.constexpr, SHIFT: tl.constexpr, NCT: tl.constexpr,
                   BOUND: tl.constexpr, QMAX2: tl.constexpr, ABLK: tl.constexpr):
    """Program (plane j, step s, column tile ct): the B fragments ``xb[j, s, ct, L, 2 q + h]``
    (int32 fp16 pairs) of lane L = 4 g + c, chunk q: column g = row 8 ct + g of x, h = 0 the
    bytes (0, 2), h = 1 the bytes (1, 3) of word 16 s + 4 q + c, each value ``x' = fp16(x alpha
    2^-(SHIFT j))`` (0 past M, past the plane's bytes, past K); and ``sx[j, s, 8 ct + m]`` = the
    fp32 sum of those x' of row 8 ct + m over the step's 64 bytes (the decode's 1024 offset and
    the zero point are removed with it). ``BOUND``: also ``sb[j, s, 8 ct + m]`` = ``sum |x| +
    QMAX2 sum |x - x~|`` over the same elements in x's own units (x~ = x' / (alpha 2^-(SHIFT j)),
    the value the MMAs see): the deterministic bound's per-step weight (see :func:`coarse_mma`).
    Every program finds the per-row power of two ``alpha`` of its 8 rows itself (a pass over those
    rows of x, which L2 holds, instead of a launch of its own); programs (0, 0, ct) store it for
    the main kernel."""
    ct = tl.program_id(0) % NCT
    j = tl.program_id(0) // (NS * NCT)
    s = (tl.program_id(0) // NCT) % NS
    o_r = 8 * ct + tl.arange(0, 8)
    alpha8 = _row_alpha(x_ptr, o_r, o_r < M, stride_xm, K, ABLK)  # [8]
    if (j == 0) & (s == 0):
        tl.store(alpha_ptr + o_r, alpha8, mask=o_r < M)
    # fragments: [32 lanes, 8 (q, h)] -> pairs (lo, hi)
    o_l = tl.arange(0, 32)[:, None]
    o_e = tl.arange(0, 8)[None, :]
    g = 8 * ct + o_l // 4  # the row of x this lane's column holds
    c = o_l % 4
    q = o_e // 2
    h = o_e % 2
    byte_lo = 4 * (16 * s + 4 * q + c) + h  # byte 0 or 1 of the word
    byte_hi = byte_lo + 2  # byte 2 or 3
    m_g = g < M
    # this lane's row's alpha, picked out of the 8 (one-hot over [32, 8])
    a = tl.max(tl.where(o_l // 4 == tl.arange(0, 8)[None, :], alpha8[None, :], 0.0), axis=1)[:, None]
    f = a * ((127 - SHIFT * j) << 23).to(tl.float32, bitcast=True)  # alpha 2^-(SHIFT j), exact
    k_lo = j * L + byte_lo
    k_hi = j * L + byte_hi
    m_lo = m_g & (byte_lo < L) & (k_lo < K)
    m_hi = m_g & (byte_hi < L) & (k_hi < K)
    x_lo = (tl.load(x_ptr + g * stride_xm + k_lo, mask=m_lo, other=0.0).to(tl.float32) * f).to(tl.float16)
    x_hi = (tl.load(x_ptr + g * stride_xm + k_hi, mask=m_hi, other=0.0).to(tl.float32) * f).to(tl.float16)
    pair = (x_lo.to(tl.int16, bitcast=True).to(tl.int32) & 0xFFFF) | (x_hi.to(tl.int16, bitcast=True).to(tl.int32) << 16)
    tl.store(xb_ptr + ((j * NS + s) * NCT + ct) * 256 + o_l * 8 + o_e, pair)
    # sums over the step's 64 bytes, from the same fp16 values: [8 rows, 64 bytes]
    o_m = 8 * ct + tl.arange(0, 8)[:, None]
    o_b = 64 * s + tl.arange(0, 64)[None, :]
    m_m = o_m < M
    am = alpha8[:, None]
    fm = am * ((127 - SHIFT * j) << 23).to(tl.float32, bitcast=True)
    k = j * L + o_b
    xo = tl.load(x_ptr + o_m * stride_xm + k, mask=m_m & (o_b < L) & (k < K), other=0.0).to(tl.float32)
    xv = (xo * fm).to(tl.float16).to(tl.float32)
    tl.store(sx_ptr + (j * NS + s) * (8 * NCT) + 8 * ct + tl.arange(0, 8), tl.sum(xv, axis=1))
    if BOUND:
        xt = xv / fm  # exact: fm is a power of two
        sb = tl.sum(tl.abs(xo), axis=1) + QMAX2 * tl.sum(tl.abs(xo - xt), axis=1)
        tl.store(sb_ptr + (j * NS + s) * (8 * NCT) + 8 * ct + tl.arange(0, 8), sb)


@triton.jit
def _mma16816(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3, NT: tl.constexpr, INTERPRET: tl.constexpr):
    """D = A B + C of one ``mma.sync.m16n8k16`` per warp, operands as per-lane [NT] tensors (lane
    = element % 32, warp = element // 32; layouts in the module docstring)."""
    if INTERPRET:
        d0, d1, d2, d3 = mma16816_f16x2(a0, a1, a2, a3, b0, b1, NT)
        return c0 + d0, c1 + d1, c2 + d2, c3 + d3
    else:
        return tl.inline_asm_elementwise(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {$0, $1, $2, $3}, {$4, $5, $6, $7}, {$8, $9}, "
            "{$10, $11, $12, $13};",
            "=f,=f,=f,=f,r,r,r,r,r,r,0,1,2,3", [a0, a1, a2, a3, b0, b1, c0, c1, c2, c3],
            dtype=(tl.float32, tl.float32, tl.float32, tl.float32), is_pure=True, pack=1)


@triton.jit
def _dec(w, mask, INTERPRET: tl.constexpr):
    """``(w & mask) | 0x64006400``: the fp16 pair ``1024 + q 2^e`` of a plane's two codes, one
    ``lop3`` (inline PTX: from Triton's and / or ptxas emits two instructions)."""
    if INTERPRET:
        return (w & mask) | _MAGIC
    return tl.inline_asm_elementwise("lop3.b32 $0, $1, $2, 0x64006400, 0xEA;", "=r,r,r", [w, mask],
                                     dtype=tl.int32, is_pure=True, pack=1)


@triton.jit
def _dec8(w, HI: tl.constexpr, INTERPRET: tl.constexpr):
    """INT8 (one plane, a byte per code): bytes (0, 2) (``HI``: (1, 3)) of ``w`` under the fp16
    exponent byte 0x64, i.e. the pair ``1024 + q``: one ``prmt`` (no shift, no mask)."""
    if INTERPRET:
        if HI:
            return ((w >> 8) & 0x00FF00FF) | _MAGIC
        return (w & 0x00FF00FF) | _MAGIC
    if HI:
        return tl.inline_asm_elementwise("prmt.b32 $0, $1, 0x64646464, 0x4341;", "=r,r", [w],
                                         dtype=tl.int32, is_pure=True, pack=1)
    return tl.inline_asm_elementwise("prmt.b32 $0, $1, 0x64646464, 0x4240;", "=r,r", [w],
                                     dtype=tl.int32, is_pure=True, pack=1)


@triton.jit
def _frag(w_g, w_g8, mask, BITS: tl.constexpr, INTERPRET: tl.constexpr):
    """A fragment (a0, a1, a2, a3) of one chunk: words of rows g and g + 8 -> their byte pairs
    (0, 2) and (1, 3) decoded for one plane (``mask``: its bits; unused for INT8). ``w_g`` /
    ``w_g8`` are (word, word >> 8) pairs: the shift is shared by all planes of a step."""
    if BITS == 8:
        return (_dec8(w_g[0], False, INTERPRET), _dec8(w_g8[0], False, INTERPRET), _dec8(w_g[0], True, INTERPRET),
                _dec8(w_g8[0], True, INTERPRET))
    return (_dec(w_g[0], mask, INTERPRET), _dec(w_g8[0], mask, INTERPRET), _dec(w_g[1], mask, INTERPRET),
            _dec(w_g8[1], mask, INTERPRET))


@triton.jit
def _words(v, NT: tl.constexpr, BITS: tl.constexpr):
    """One loaded 16-byte vector of each lane ([NT, 4] int32) -> its 4 words as (word, word >> 8)
    pairs (INT8 needs no shift: its decode permutes bytes)."""
    e0, e1, e2, e3 = _split4(v, NT)
    if BITS == 8:
        return (e0, e0), (e1, e1), (e2, e2), (e3, e3)
    return (e0, e0 >> 8), (e1, e1 >> 8), (e2, e2 >> 8), (e3, e3 >> 8)


@triton.jit
def _load_step(p_w, sz_ptr, blk, m_b, g, i_s, NS, L: tl.constexpr, NG: tl.constexpr, G: tl.constexpr,
               P: tl.constexpr):
    """Every DRAM load of K step ``i_s`` (nothing when i_s == NS), as raw bits: the lane's four
    16-byte code vectors (u = 0..3) and, per plane j, the scale-zero words of its token rows g,
    g + 8, g + 16, g + 24. Raw, so that a prefetched step costs registers but no wait: anything
    computed from a load in the iteration that issues it would stall there."""
    m = m_b & (i_s < NS)
    base = p_w[:, None] + i_s * 512 + tl.arange(0, 4)[None, :]
    vs = (tl.load(base, mask=m[:, None], other=0), tl.load(base + 128, mask=m[:, None], other=0),
          tl.load(base + 256, mask=m[:, None], other=0), tl.load(base + 384, mask=m[:, None], other=0))
    szs = ()
    for j in tl.static_range(P):
        p_sz = sz_ptr + (blk * NG + (j * L + 64 * i_s) // G) * 32 + g
        szs = szs + ((tl.load(p_sz, mask=m, other=0), tl.load(p_sz + 8, mask=m, other=0),
                      tl.load(p_sz + 16, mask=m, other=0), tl.load(p_sz + 24, mask=m, other=0)),)
    return vs, szs


@triton.jit
def _tile_mmas(w00, w01, w02, w03, w10, w11, w12, w13, w20, w21, w22, w23, w30, w31, w32, w33, M2, p_xb,
               NT: tl.constexpr, SHIFT: tl.constexpr, INTERPRET: tl.constexpr):
    """One plane-step of one 8-column tile: the 8 MMAs (2 token tiles x 4 chunks) with the B
    fragments at ``p_xb`` [NT] (this lane's 8 int32); returns the two C tiles (d: token tile 0,
    e: token tile 1), each (c0, c1, c2, c3). A fragments are pure functions of the words, so a
    second column tile recomputes nothing (common subexpressions)."""
    o_4 = tl.arange(0, 4)[None, :]
    b00, b01, b10, b11 = _split4(tl.load(p_xb[:, None] + o_4), NT)  # chunk 0 (h 0, 1), chunk 1
    b20, b21, b30, b31 = _split4(tl.load(p_xb[:, None] + 4 + o_4), NT)
    zero = tl.zeros([NT], dtype=tl.float32)
    d0, d1, d2, d3 = zero, zero, zero, zero
    e0, e1, e2, e3 = zero, zero, zero, zero
    # chunk q of tile t: words (row g, row g + 8) = vector 2 t + q // 2, e = 2 (q % 2) + rh
    f0, f1, f2, f3 = _frag(w00, w01, M2, SHIFT, INTERPRET)
    d0, d1, d2, d3 = _mma16816(f0, f1, f2, f3, b00, b01, d0, d1, d2, d3, NT, INTERPRET)
    f0, f1, f2, f3 = _frag(w02, w03, M2, SHIFT, INTERPRET)
    d0, d1, d2, d3 = _mma16816(f0, f1, f2, f3, b10, b11, d0, d1, d2, d3, NT, INTERPRET)
    f0, f1, f2, f3 = _frag(w10, w11, M2, SHIFT, INTERPRET)
    d0, d1, d2, d3 = _mma16816(f0, f1, f2, f3, b20, b21, d0, d1, d2, d3, NT, INTERPRET)
    f0, f1, f2, f3 = _frag(w12, w13, M2, SHIFT, INTERPRET)
    d0, d1, d2, d3 = _mma16816(f0, f1, f2, f3, b30, b31, d0, d1, d2, d3, NT, INTERPRET)
    f0, f1, f2, f3 = _frag(w20, w21, M2, SHIFT, INTERPRET)
    e0, e1, e2, e3 = _mma16816(f0, f1, f2, f3, b00, b01, e0, e1, e2, e3, NT, INTERPRET)
    f0, f1, f2, f3 = _frag(w22, w23, M2, SHIFT, INTERPRET)
    e0, e1, e2, e3 = _mma16816(f0, f1, f2, f3, b10, b11, e0, e1, e2, e3, NT, INTERPRET)
    f0, f1, f2, f3 = _frag(w30, w31, M2, SHIFT, INTERPRET)
    e0, e1, e2, e3 = _mma16816(f0, f1, f2, f3, b20, b21, e0, e1, e2, e3, NT, INTERPRET)
    f0, f1, f2, f3 = _frag(w32, w33, M2, SHIFT, INTERPRET)
    e0, e1, e2, e3 = _mma16816(f0, f1, f2, f3, b30, b31, e0, e1, e2, e3, NT, INTERPRET)
    return d0, d1, d2, d3, e0, e1, e2, e3


@triton.jit
def _fix8(a000, a001, a010, a011, a100, a101, a110, a111, d0, d1, d2, d3, e0, e1, e2, e3,
          z00, z01, z10, z11, s00, s01, s10, s11, p_sx):
    """The 8 accumulators of one column tile (token tile t, row half rh, column parity cp) plus
    their plane-step's C values, offset- and zero-corrected and scaled (:func:`_fix`); ``p_sx``:
    the step's x sums of this lane's columns 2c, 2c + 1."""
    sx0 = tl.load(p_sx)
    sx1 = tl.load(p_sx + 1)
    return (_fix(a000, d0, z00, sx0, s00), _fix(a001, d1, z00, sx1, s00), _fix(a010, d2, z01, sx0, s01),
            _fix(a011, d3, z01, sx1, s01), _fix(a100, e0, z10, sx0, s10), _fix(a101, e1, z10, sx1, s10),
            _fix(a110, e2, z11, sx0, s11), _fix(a111, e3, z11, sx1, s11))


@triton.jit
def _store8(lg_ptr, alpha_ptr, a000, a001, a010, a011, a100, a101, a110, a111, tok, col0, M, N):
    """logits[m, token] of one column tile: token = tok + 16 t + 8 rh, m = col0 + cp."""
    r0 = 1.0 / tl.load(alpha_ptr + col0, mask=col0 < M, other=1.0)
    r1 = 1.0 / tl.load(alpha_ptr + col0 + 1, mask=col0 + 1 < M, other=1.0)
    m0 = col0 < M
    m1 = col0 + 1 < M
    tl.store(lg_ptr + col0 * N + tok, a000 * r0, mask=m0 & (tok < N))
    tl.store(lg_ptr + (col0 + 1) * N + tok, a001 * r1, mask=m1 & (tok < N))
    tl.store(lg_ptr + col0 * N + tok + 8, a010 * r0, mask=m0 & (tok + 8 < N))
    tl.store(lg_ptr + (col0 + 1) * N + tok + 8, a011 * r1, mask=m1 & (tok + 8 < N))
    tl.store(lg_ptr + col0 * N + tok + 16, a100 * r0, mask=m0 & (tok + 16 < N))
    tl.store(lg_ptr + (col0 + 1) * N + tok + 16, a101 * r1, mask=m1 & (tok + 16 < N))
    tl.store(lg_ptr + col0 * N + tok + 24, a110 * r0, mask=m0 & (tok + 24 < N))
    tl.store(lg_ptr + (col0 + 1) * N + tok + 24, a111 * r1, mask=m1 & (tok + 24 < N))


@triton.jit
def _fix(acc, d, zz, sx, sc):
    """acc + scale (d - (1024 + z 2^e) sx): the step's MMA sum without the decode offset and the
    zero point, times the group scale."""
    return acc + sc * (d - zz * sx)


@triton.jit
def _step(accs, step, i_s, xb_ptr, sx_ptr, lane, c, NS: tl.constexpr, P: tl.constexpr,
          SHIFT: tl.constexpr, MASK: tl.constexpr, NCT: tl.constexpr, NT: tl.constexpr, INTERPRET: tl.constexpr):
    """One K step (64 bytes of each of the warp's 32 token rows, all P planes) of the loaded
    ``step`` (:func:`_load_step`) into ``accs``: per column tile ct (rows 8 ct .. 8 ct + 7 of x)
    the 8 accumulators a{t}{rh}{cp}. The A fragments are pure functions of the words, so every
    column tile after the first recomputes nothing (common subexpressions)."""
    vs, szs = step
    # vector u = 2 t + qh: words (qi, rh) = (0, 0), (0, 1), (1, 0), (1, 1) of chunks 2 qh + qi
    w00, w01, w02, w03 = _words(vs[0], NT, SHIFT)
    w10, w11, w12, w13 = _words(vs[1], NT, SHIFT)
    w20, w21, w22, w23 = _words(vs[2], NT, SHIFT)
    w30, w31, w32, w33 = _words(vs[3], NT, SHIFT)
    for j in tl.static_range(P):
        M2 = tl.full([NT], (MASK << (SHIFT * j)) * 0x10001, tl.int32)  # the plane's bits, both halves
        # per token row: the fp16 pair (scale, 1024 + z 2^(SHIFT j))
        s00, z00 = _half_pair(szs[j][0])  # token tile 0, row g
        s01, z01 = _half_pair(szs[j][1])  # token tile 0, row g + 8
        s10, z10 = _half_pair(szs[j][2])
        s11, z11 = _half_pair(szs[j][3])
        p_xb = xb_ptr + (j * NS + i_s) * (NCT * 256) + lane * 8
        p_sx = sx_ptr + (j * NS + i_s) * (8 * NCT) + 2 * c
        for ct in tl.static_range(NCT):
            d0, d1, d2, d3, e0, e1, e2, e3 = _tile_mmas(w00, w01, w02, w03, w10, w11, w12, w13, w20, w21, w22,
                                                        w23, w30, w31, w32, w33, M2, p_xb + 256 * ct, NT, SHIFT,
                                                        INTERPRET)
            a = accs[ct]
            accs = tuple_replace(accs, ct, _fix8(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], d0, d1, d2, d3, e0, e1,
                                            e2, e3, z00, z01, z10, z11, s00, s01, s10, s11, p_sx + 8 * ct))
    return accs


@triton.jit(do_not_specialize=["M", "N", "NB", "NR"])
def _coarse_mma_kernel(
    xb_ptr, sx_ptr, sb_ptr, alpha_ptr, w_ptr, sz_ptr, ck_ptr, clb_ptr, ci_ptr, blb_ptr, brest_ptr, lg_ptr,
    M, N, NB, NR, bcoef, abs_slack,
    L: tl.constexpr, NS: tl.constexpr, NG: tl.constexpr, P: tl.constexpr, SHIFT: tl.constexpr,
    MASK: tl.constexpr, G: tl.constexpr, BN: tl.constexpr, MP: tl.constexpr, KCAND: tl.constexpr,
    NCT: tl.constexpr, PREFETCH: tl.constexpr, BOUND: tl.constexpr, INTERPRET: tl.constexpr,
):
    """Program: BN token rows (one 32-row block per warp, two 16-row MMA tiles each) against the M
    <= 8 NCT rows of x (NCT column tiles of 8: the A fragments are decoded once for all of them).
    Writes logits [M, N] (scratch and output) and the block's candidates."""
    NT: tl.constexpr = BN  # one lane per 32 token rows' share: 32 lanes x BN / 32 warps
    i_n = tl.program_id(0).to(tl.int64)
    o_e = tl.arange(0, NT)
    lane = o_e % 32
    g = lane // 4
    c = lane % 4
    blk = i_n * (BN // 32) + o_e // 32  # [NT] the warp's 32-row block
    m_b = blk < NR
    p_w = w_ptr + blk * (NS * 512) + lane * 4  # [NT], + u * 128 + e
    zero = tl.zeros([NT], dtype=tl.float32)
    # accumulators [NT] of column tile ct: a{t}{rh}{cp} (token tile t, row half rh, column 2c + cp)
    accs = zeros_tuple((zero, zero, zero, zero, zero, zero, zero, zero), NCT)
    if PREFETCH == 1:
        # step s + 1's loads issued before step s's MMAs, through one loop-carried buffer
        cur = _load_step(p_w, sz_ptr, blk, m_b, g, 0, NS, L, NG, G, P)
        for i_s in range(0, NS):
            nxt = _load_step(p_w, sz_ptr, blk, m_b, g, i_s + 1, NS, L, NG, G, P)
            accs = _step(accs, cur, i_s, xb_ptr, sx_ptr, lane, c, NS, P, SHIFT, MASK, NCT, NT, INTERPRET)
            cur = nxt
    else:
        # each step's loads at the top of its iteration
        for i_s in range(0, NS):
            accs = _step(accs, _load_step(p_w, sz_ptr, blk, m_b, g, i_s, NS, L, NG, G, P), i_s, xb_ptr, sx_ptr, lane,
                         c, NS, P, SHIFT, MASK, NCT, NT, INTERPRET)
    # logits[m, token] for token = 32 blk + 16 t + 8 rh + g, m = 8 ct + 2 c + cp (the output
    # buffer doubles as scratch)
    tok = blk * 32 + g
    for ct in tl.static_range(NCT):
        a = accs[ct]
        _store8(lg_ptr, alpha_ptr, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], tok, 8 * ct + 2 * c, M, N)
    tl.debug_barrier()  # the block's logits, written by every warp, are visible to the whole program
    o_n = i_n * BN + tl.arange(0, BN)
    m_n = o_n < N
    o_m = tl.arange(0, MP)
    m_m = o_m < M
    row = tl.load(lg_ptr + o_m[:, None] * N + o_n[None, :], mask=m_m[:, None] & m_n[None, :], other=0.0)
    if BOUND:
        # the deterministic bound sum_{plane-steps} s(token, group) sb(m, step): one [BN] scale
        # load (the block's scale-zero words, coalesced) and one [MP, BN] FMA per step
        bnd = tl.zeros([MP, BN], dtype=tl.float32)
        blk_n = o_n // 32
        for js in range(0, P * NS):
            grp = ((js // NS) * L + 64 * (js % NS)) // G
            sc, _ = _half_pair(tl.load(sz_ptr + (blk_n * NG + grp) * 32 + o_n % 32, mask=m_n, other=0))
            sbv = tl.load(sb_ptr + js * (8 * NCT) + o_m, mask=m_m, other=0.0)
            bnd += sbv[:, None] * sc[None, :]
        block_epilogue(row, bnd, sz_ptr, sz_ptr, sz_ptr, sz_ptr, ck_ptr, clb_ptr, ci_ptr, blb_ptr, brest_ptr, lg_ptr,
                  o_m, m_m, o_n, m_n, i_n, M, N, NB, 0, bcoef, 0.0, abs_slack,
                  NG, KIND_DONE, 1, False, 0.0, False, KCAND, 16, BN)
    else:
        block_epilogue(row, row, sz_ptr, sz_ptr, sz_ptr, sz_ptr, ck_ptr, ck_ptr, ci_ptr, ck_ptr, ck_ptr, lg_ptr,
                  o_m, m_m, o_n, m_n, i_n, M, N, NB, 0, 0.0, 0.0, 0.0,
                  NG, KIND_DONE, 0, False, 0.0, False, KCAND, 16, BN)




def _register_cap(bits: int, nct: int) -> dict:
    """``maxnreg`` where a few registers decide how many programs fit an SM, and so how many waves
    a head's blocks take. INT4 with one column tile: 64 — the larger epilogue of M >= 2 (MP = 8)
    takes the kernel from 64 to 68 registers, 8 -> 7 programs of 4 warps per SM, and a
    124160-token head's 970 programs then need a second wave for 46 of them: the whole pass took
    2x as long (ncu, H200: 223 vs 119 µs at M = 8 / M = 1, SM active 70%;
    with the cap 138 µs). At 64 the compiler
    spills 8 bytes outside the K loop. INT2 with two column tiles: 128 (from 131: 3 -> 4
    programs per SM, 3 -> 2 waves of 970; 24 bytes spilled, 7 more instructions in the loop;
    sm_90 offline compile). INT2 with one tile (100) would spill in the loop; INT8 fits."""
    if bits == 4 and nct == 1:
        return {"maxnreg": 64}
    if bits == 2 and nct == 2:
        return {"maxnreg": 128}
    return {}


def mma_bound_coef(bits: int, ns: int) -> float:
    """The deterministic bound's multiplier ``0.5 (1 + eps)`` on the tensor-core pass.

    Soundness: with ``|w - w~| <= s/2`` (the INTx quantizer), ``|w~| <= s qmax`` and x~ the fp16
    x' the MMAs multiply (scaled back), ``|x.w - x~.w~| <= sum_g s_g (||x_g||_1 / 2 + qmax
    ||x_g - x~_g||_1)``; the kernel accumulates ``sum s (||x||_1 + 2 (qmax + 1) ||x - x~||_1)``
    per plane-step (``sb``) and multiplies by ``0.5 (1 + eps)``. ``eps`` covers fp32 rounding of
    the coarse value and of the bound: every term is at most ``s (qmax + 1024) |x~_k|`` (the
    decode multiplies ``1024 2^-(SHIFT j) + q``; the zero point carries the offset), summed 64
    deep in an MMA step and in the step's x sums, then over the ``P * NS`` plane-steps:
    :func:`~lowbit.ops.coarse_head.reference.rounding_eps` with ``offset = 1024`` at that depth."""
    return 0.5 * (1.0 + rounding_eps(bits, 64 + (8 // bits) * ns + 8, False, offset=1024))


def coarse_mma(x, words, sz, *, n, ell, bits, group_size, block, kcand, write_logits, bound=BOUND_NONE):
    """Launch the tensor-core coarse pass. ``x`` [M, K] (unit stride along K; rows in launches of
    MAX_M = 16 — one or two column tiles of 8 — each reading the codes once); ``words`` / ``sz``
    from :func:`mma_tile`. ``bound``: BOUND_NONE (fast mode: key = coarse logit) or BOUND_DET
    (certified: key = upper bound, plus the lower bounds and each block's best unemitted key; the
    bound is :func:`mma_bound_coef`'s, sound for the fp16 x the MMAs see). Returns the six
    ``CoarseOut`` tensors (certified outputs empty in fast mode; the logits are computed either
    way, returned if ``write_logits``)."""
    m, k = x.shape
    p = 8 // bits
    ns = words.shape[1]
    ng = sz.shape[1]
    dev = x.device
    nb = -(-n // block)
    # the logits are the kernel's scratch: allocated whatever write_logits says
    cert = bound == BOUND_DET
    cand_key, cand_lb, cand_idx, block_lb, block_rest, logits = coarse_outputs(m, n, nb, kcand, cert, True, dev)
    bcoef = mma_bound_coef(bits, ns) if cert else 0.0
    for r0 in range(0, m, MAX_M):
        r1 = min(m, r0 + MAX_M)
        mc = r1 - r0
        # column tiles: a power of two, so one compile per epilogue tile MP serves
        # every M of its band (the tiles past M multiply zero columns of x)
        nct = max(1, triton.next_power_of_2(mc) // 8)
        xc = x[r0:r1]
        alpha = torch.empty(mc, dtype=torch.float32, device=dev)
        xb = torch.empty(p * ns * nct * 256, dtype=torch.int32, device=dev)
        sx = torch.empty(p * ns * nct * 8, dtype=torch.float32, device=dev)
        sb = torch.empty(p * ns * nct * 8 if cert else 1, dtype=torch.float32, device=dev)
        _x_frag_kernel[(p * ns * nct,)](xc, alpha, xb, sx, sb, mc, k, xc.stride(0), L=ell, NS=ns, SHIFT=bits, NCT=nct,
                                        BOUND=cert, QMAX2=2.0 * (1 << bits), ABLK=1024,
                                        num_warps=4)
        # certified outputs of these rows (0-row tensors in fast mode: any pointer will do)
        lb_c, blb_c, brest_c = ((cand_lb[r0:r1], block_lb[r0:r1], block_rest[r0:r1]) if cert
                                else (cand_key, cand_key, cand_key))
        # rows r0..r1 of the [M, C] / [M, N] outputs are contiguous: the kernel writes the slices
        _coarse_mma_kernel[(nb,)](
            xb, sx, sb, alpha, words, sz, cand_key[r0:r1], lb_c, cand_idx[r0:r1], blb_c, brest_c, logits[r0:r1], mc,
            n, nb, words.shape[0], bcoef, ABS_SLACK,
            L=ell, NS=ns, NG=ng, P=p, SHIFT=bits, MASK=(1 << bits) - 1, G=group_size, BN=block,
            MP=triton.next_power_of_2(mc), KCAND=kcand, NCT=nct, PREFETCH=_PREFETCH_TABLE.get((bits, nct), 0), BOUND=cert,
            INTERPRET=interpret_mode(), num_warps=block // 32,
            num_stages=1, **launch_options(dev, False, False, None),
            **_register_cap(bits, nct),
        )
    if not write_logits:  # a fresh empty tensor, not a view (custom ops may not return views)
        logits = torch.empty(0, n, dtype=torch.float32, device=dev)
    return cand_key, cand_lb, cand_idx, block_lb, block_rest, logits


__all__ = ["MAX_M", "coarse_mma", "mma_bound_coef"]
