"""NVFP4 ``gathered_dot`` / ``gathered_bias`` on the tensor cores (bf16 ``mma.sync``).

Why: the CUDA-core kernel (``cuda_core.py``) decodes every E2M1 code to fp32 and spends an FMA on
it; past a few hundred gathered rows that arithmetic, not the bytes, sets its time (K4096 B256 T64
ran at 5x its byte floor). Here the decoded codes go to an ``mma.sync.m16n8k16`` bf16 MMA whose A
operand is 16 gathered rows and whose B columns 0 and 1 are the two halves of the batch row's
``x`` (the other columns are zero), so the dot costs one MMA per 256 weight elements and the
decode is a few integer ops per pair of codes.

Exact decode to bf16, scale included (``_a_bits`` + the ``mul.rn.bf16x2`` in ``_MMA_PTX``):

* An E2M1 code ``s e1 e0 m`` with its magnitude bits placed at bf16 bits 8..6 and its sign at bit
  15 is a bf16 number equal to the code's value times 2^-126 (bf16 subnormal for e = 0, normal
  otherwise). Codes ``i`` and ``i + 4`` of a 32-bit word land in the two halves of one bf16x2
  register with the same shifts, so a register costs two shifts and two masks (four SASS ops).
* The row's E4M3 group scale ``s`` (decoded by the hardware convert) is turned into the bf16
  ``s * 2^119`` (exact: 4 significant bits, below the bf16 maximum), and one ``mul.rn.bf16x2``
  gives ``e2m1 * s * 2^-7``: at most 5 significant bits, between 2^-17 and 21, so exact in bf16.
  Because the scale is applied to A, MMAs may mix scale groups and the whole row chains in one
  accumulator; the 2^7 and the global scale multiply the final dot.

The k order inside an MMA is free (A and B only have to agree). Lane ``L = 4 g + t`` of a warp
takes, for each row it holds (g and g + 8 of the 16-row tile), the 16-byte segment ``4 c + t`` of
K chunk c (128 elements: segment ``4 c + t`` is elements ``32 (4 c + t) .. + 31``), i.e. one
16-byte load per row, coalesced across the four lanes of a row. Word j of a segment holds elements
``8 j .. 8 j + 7`` (element 2u in the low nibble of byte u); its register i holds elements
``8 j + i`` and ``8 j + i + 4``. MMA ``2 j + h`` of a chunk uses the lane's registers ``2 h`` and
``2 h + 1`` of word j for both rows (A fragments ``a0 / a2`` = row g, ``a1 / a3`` = row g + 8), and
B column 0 (held by lanes g = 0) the matching pairs of ``x``, re-paired from its natural order by
one ``prmt`` per register. Fragment layout of ``m16n8k16`` (PTX ISA): ``a0 = (row g, k 2t, 2t+1)``,
``a1 = (row g + 8, ..)``, ``a2 = (row g, k 2t+8, 2t+9)``, ``a3 = (row g + 8, ..)``; ``b0 = (k 2t,
2t+1, column g)``, ``b1 = (k 2t+8, 2t+9, ..)``; ``c0 = (row g, column 2t)``, ``c2 = (row g + 8,
column 2t)``; column 0 of the result is c0 / c2 of the lanes with t = 0.

A program owns one batch row and ``8 RT`` of its T indices, each index on both row halves of an
MMA tile: rows g read the first half of K against B column 0, rows g + 8 the second half against
column 1, and a row's dot is c0 + c3 of lane 4 g. Its W warps split the K chunks of a half (chunk
``warp + W i``); a warp keeps the weights of its next chunk in flight (raw bits only: see
:func:`_load_rows`) and x one chunk ahead; the warps' sums are added at the end and scattered
(``gathered_bias``) or stored (``gathered_dot``) in the same launch. Data of lane L of warp w sit
in element ``32 w + L`` of ``[32 W]`` tensors (as in ``fp8_gemm/mma_gemv.py``); under the
interpreter the PTX is emulated with tensor arithmetic (``lowbit/ops/_lanes.py``). Launch table:
:func:`pick_config`. Measured numbers: docs/gathered.md.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from lowbit._backend import interpret_mode
from lowbit.ops._lanes import i32, mma16816_values, split4, zeros_tuple
from lowbit.ops._triton_pdl import launch_options
from lowbit.ops.gathered.decode import cast_rne, fp8_data

__all__ = ["launch", "pick_config", "use_lean", "use_trigger"]


_MAG = tl.constexpr(0x01C001C0)  # bf16 bits 8..6 of both halves: an E2M1 magnitude, placed
_SIGN = tl.constexpr(i32(0x80008000))  # bf16 sign bits of both halves
_HI16 = tl.constexpr(i32(0xFFFF0000))
_SCALE_BIAS = tl.constexpr(2.0**119)  # the scale's factor; with the decode's 2^-126: 2^-7
_UNDO_SCALE = tl.constexpr(128.0)  # 2^7, put back on the final dot

# One bf16 MMA with the scale multiplication of its A operand: A = bits * scale (per row: $8 for
# row g, $9 for row g + 8), exact (see the module docstring). Only column 0 of the result is used;
# the other columns (c1, c3, and c0 / c2 of lanes t > 0) are chained too, which costs nothing,
# where zeroing them for every MMA cost two moves.
_MMA_PTX = tl.constexpr("""
{
.reg .b32 a0, a1, a2, a3;
mul.rn.bf16x2 a0, $4, $8;
mul.rn.bf16x2 a1, $5, $9;
mul.rn.bf16x2 a2, $6, $8;
mul.rn.bf16x2 a3, $7, $9;
mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {$0, $1, $2, $3}, {a0, a1, a2, a3}, {$10, $11}, {$12, $13, $14, $15};
}
""")


@triton.jit
def _bf16_pair(r):
    """An int32 holding two bf16 (low half first) -> their fp32 values (exact, subnormals kept)."""
    lo = (r << 16).to(tl.float32, bitcast=True)
    hi = (r & _HI16).to(tl.float32, bitcast=True)
    return lo, hi


@triton.jit
def _scaled_mma(a0, a1, a2, a3, s0, s1, b0, b1, c, NT: tl.constexpr, INTERPRET: tl.constexpr):
    """c = (c0, c1, c2, c3) + (A * scales) B for one warp-wide m16n8k16 bf16 MMA; every operand a
    per-lane int32 [NT] (bf16x2 bits), layouts in the module docstring."""
    c0, c1, c2, c3 = c
    if INTERPRET:
        s0l, s0h = _bf16_pair(s0)
        s1l, s1h = _bf16_pair(s1)
        a0l, a0h = _bf16_pair(a0)
        a1l, a1h = _bf16_pair(a1)
        a2l, a2h = _bf16_pair(a2)
        a3l, a3h = _bf16_pair(a3)
        b0l, b0h = _bf16_pair(b0)
        b1l, b1h = _bf16_pair(b1)
        # the scaled A values are exact in fp32 as in bf16 (see the module docstring)
        d0, d1, d2, d3 = mma16816_values(a0l * s0l, a0h * s0h, a1l * s1l, a1h * s1h, a2l * s0l, a2h * s0h,
                                         a3l * s1l, a3h * s1h, b0l, b0h, b1l, b1h, NT)
        res = (c0 + d0, c1 + d1, c2 + d2, c3 + d3)
    else:
        res = tl.inline_asm_elementwise(_MMA_PTX, "=f,=f,=f,=f,r,r,r,r,r,r,r,r,0,1,2,3",
                                        [a0, a1, a2, a3, s0, s1, b0, b1, c0, c1, c2, c3],
                                        dtype=(tl.float32, tl.float32, tl.float32, tl.float32), is_pure=True,
                                        pack=1)
    return res


@triton.jit
def _a_bits(w, i: tl.constexpr):
    """bf16x2 bits (x 2^-126) of codes i (low half) and i + 4 (high half) of the word ``w``."""
    if i == 0:
        r = ((w << 6) & _MAG) | ((w << 12) & _SIGN)
    elif i == 1:
        r = ((w << 2) & _MAG) | ((w << 8) & _SIGN)
    elif i == 2:
        r = ((w >> 2) & _MAG) | ((w << 4) & _SIGN)
    else:
        r = ((w >> 6) & _MAG) | (w & _SIGN)
    return r


@triton.jit
def _prmt(a, b, SEL: tl.constexpr, INTERPRET: tl.constexpr):
    """``prmt.b32`` with selector 0x5410 (low halves of a, b) or 0x7632 (high halves)."""
    if INTERPRET:
        if SEL == 0x5410:
            r = (a & 0xFFFF) | (b << 16)
        else:
            r = ((a >> 16) & 0xFFFF) | (b & _HI16)
    else:
        if SEL == 0x5410:
            r = tl.inline_asm_elementwise("prmt.b32 $0, $1, $2, 0x5410;", "=r,r,r", [a, b], dtype=tl.int32,
                                          is_pure=True, pack=1)
        else:
            r = tl.inline_asm_elementwise("prmt.b32 $0, $1, $2, 0x7632;", "=r,r,r", [a, b], dtype=tl.int32,
                                          is_pure=True, pack=1)
    return r


@triton.jit
def _scale_pair(byte):
    """E4M3 scale bytes (int32 0..255) -> bf16x2 bits of ``s * 2^119`` in both halves (NaN for the
    NaN codes). s * 2^119 has at most 4 significant bits, so its fp32 bits end in 16 zeros."""
    f = (fp8_data(byte.to(tl.uint8)) * _SCALE_BIAS).to(tl.int32, bitcast=True)
    return f | ((f >> 16) & 0xFFFF)


# Both E4M3 scale bytes of an int16 (in an int32) -> bf16x2 ``s * 2^119`` (same value in both
# halves) for each: one hardware convert of the pair to f16x2, then each half to fp32, times
# 2^119 (0f7B000000, exact) and back to bf16x2 (exact: 4 significant bits). NaN codes give NaN.
_SCALE_PAIR_PTX = tl.constexpr("""
{
.reg .b16 s, lo, hi;
.reg .b32 h;
.reg .f32 a, b;
cvt.u16.u32 s, $2;
cvt.rn.f16x2.e4m3x2 h, s;
mov.b32 {lo, hi}, h;
cvt.f32.f16 a, lo;
cvt.f32.f16 b, hi;
mul.f32 a, a, 0f7B000000;
mul.f32 b, b, 0f7B000000;
cvt.rn.bf16x2.f32 $0, a, a;
cvt.rn.bf16x2.f32 $1, b, b;
}
""")


@triton.jit
def _scale_pairs(sv, INTERPRET: tl.constexpr):
    """A segment's two E4M3 scale bytes (the int16 ``sv``: group 2 seg low, 2 seg + 1 high) ->
    (bf16x2 of group 2 seg, of group 2 seg + 1), as :func:`_scale_pair` gives them; on the GPU by
    one pair convert (:data:`_SCALE_PAIR_PTX`: 9 SASS instructions for both, where two
    :func:`_scale_pair` calls take about 16)."""
    v = sv.to(tl.int32)
    if INTERPRET:
        lo = _scale_pair(v & 0xFF)
        hi = _scale_pair((v >> 8) & 0xFF)
    else:
        lo, hi = tl.inline_asm_elementwise(_SCALE_PAIR_PTX, "=r,=r,r", [v], dtype=(tl.int32, tl.int32),
                                           is_pure=True, pack=1)
    return lo, hi


@triton.jit
def _load_rows(p_w, p_s, row, seg, m, s_wn, s_sn, NT: tl.constexpr):
    """One row's segment ``seg`` (int32 words, 4 of them) and its two scale bytes (an int16);
    ``m``: the lanes that load (others read zeros), or None for all of them."""
    o_4 = tl.arange(0, 4)[None, :]
    # m None: every address valid, so no zero-fill moves and no predicates
    w0, w1, w2, w3 = split4(tl.load(p_w + (row * s_wn + seg * 4)[:, None] + o_4,
                                     mask=None if m is None else m[:, None], other=None if m is None else 0), NT)
    # int16: the scale bytes of groups 2 seg, 2 seg + 1. Kept raw: decoding here would make the
    # warp wait for this load now, not when the chunk is used (no work may touch a prefetched value)
    sv = tl.load(p_s + row * s_sn + seg, mask=m, other=None if m is None else 0)
    return (w0, w1, w2, w3), sv


@triton.jit
def _load_weights(p_w, p_s, rows, m_rows, c, t, s_wn, s_sn, NSEG: tl.constexpr, HALF: tl.constexpr,
                  RT: tl.constexpr, NT: tl.constexpr, UNMASKED: tl.constexpr):
    """The weight loads of chunk c (per lane): the 2 RT rows' segment ``4 c + t`` and scales (the
    row-(g + 8) halves take segment ``HALF + 4 c + t`` of the same rows). UNMASKED: chunks are
    whole and valid in both halves, an invalid index reads row 0 (its dot is never written), and
    c is a chunk the warp computes: no masks."""
    seg = 4 * c + t
    wq = ()
    for h in tl.static_range(2 * RT):
        if h % 2 == 1:  # the second K half
            sh = seg + HALF
            m_s = sh < NSEG
        else:
            sh = seg
            m_s = (seg < HALF) & (seg < NSEG)
        if UNMASKED:
            wq = wq + (_load_rows(p_w, p_s, rows[h], sh, None, s_wn, s_sn, NT),)
        else:
            wq = wq + (_load_rows(p_w, p_s, rows[h], sh, m_s & m_rows[h], s_wn, s_sn, NT),)
    return wq


@triton.jit
def _load_x(p_x, i_b, c, g, t, s_xb, NSEG: tl.constexpr, HALF: tl.constexpr, NT: tl.constexpr,
            UNMASKED: tl.constexpr):
    """x's 16 words of segment ``4 c + t`` in the lanes with g = 0 (B column 0) and of segment
    ``HALF + 4 c + t`` in the lanes with g = 1 (column 1, which the rows g + 8, the second
    halves, are read against), zeros elsewhere. UNMASKED: c is a whole chunk of both halves, so
    the mask only picks the lanes. (Loading x in every lane instead, to drop the zero fill, cost
    3-14%: a 16-byte load of 32 lanes takes four L1 wavefronts, of 8 lanes one.)"""
    seg = 4 * c + t
    sx = seg + HALF * (g == 1)
    if UNMASKED:
        m = g < 2
    else:
        m = ((g == 0) & (seg < HALF) & (seg < NSEG)) | ((g == 1) & (sx < NSEG))
    o_4 = tl.arange(0, 4)[None, :]
    base = (i_b * s_xb + sx * 16)[:, None] + o_4
    xs = ()
    for j in tl.static_range(4):
        xs = xs + (split4(tl.load(p_x + base + 4 * j, mask=m[:, None], other=0), NT),)
    return xs


@triton.jit
def _compute_chunk(acc, wq, xs, RT: tl.constexpr, NT: tl.constexpr, INTERPRET: tl.constexpr,
                   PAIR_SCALES: tl.constexpr):
    """acc[rt] = two (c0, c1, c2, c3) chains += the 8 MMAs of one loaded chunk, per row tile.
    PAIR_SCALES: a row's two scale bytes converted together (:func:`_scale_pairs`)."""
    if PAIR_SCALES:
        scs = ()
        for h in tl.static_range(2 * RT):
            scs = scs + (_scale_pairs(wq[h][1], INTERPRET),)
    for j in tl.static_range(4):
        x0, x1, x2, x3 = xs[j]  # x elements (8j, 8j+1), (8j+2, 8j+3), ... of the segment
        b0 = _prmt(x0, x2, 0x5410, INTERPRET)  # elements 8j, 8j + 4
        b1 = _prmt(x0, x2, 0x7632, INTERPRET)  # 8j + 1, 8j + 5
        b2 = _prmt(x1, x3, 0x5410, INTERPRET)
        b3 = _prmt(x1, x3, 0x7632, INTERPRET)
        res = ()
        for rt in tl.static_range(RT):
            wg, sg = wq[2 * rt]
            w8, s8 = wq[2 * rt + 1]
            # words 0, 1: group 2 seg (low scale byte); words 2, 3: group 2 seg + 1 (high byte)
            if PAIR_SCALES:
                sc_g = scs[2 * rt][j // 2]
                sc_8 = scs[2 * rt + 1][j // 2]
            else:
                sc_g = _scale_pair((sg.to(tl.int32) >> (8 * (j // 2))) & 0xFF)
                sc_8 = _scale_pair((s8.to(tl.int32) >> (8 * (j // 2))) & 0xFF)
            # two accumulator chains per row tile (registers 0, 1 / 2, 3 of each word): half the
            # MMA latency chain, which sets the time of the small launch-bound shapes
            ca, cb = acc[rt]
            ca = _scaled_mma(_a_bits(wg[j], 0), _a_bits(w8[j], 0), _a_bits(wg[j], 1), _a_bits(w8[j], 1),
                             sc_g, sc_8, b0, b1, ca, NT, INTERPRET)
            cb = _scaled_mma(_a_bits(wg[j], 2), _a_bits(w8[j], 2), _a_bits(wg[j], 3), _a_bits(w8[j], 3),
                             sc_g, sc_8, b2, b3, cb, NT, INTERPRET)
            res = res + ((ca, cb),)
        acc = res
    return acc


@triton.jit(do_not_specialize=["T", "V"])
def _gathered_mma_kernel(
    p_x, p_w, p_s, p_gs, p_idx, p_val, p_out, T, V, alpha,
    s_xb, s_wn, s_sn, s_ib, s_it, s_vb, s_vt, s_ob, s_ot,
    K: tl.constexpr, BIAS: tl.constexpr, RT: tl.constexpr, W: tl.constexpr, LEAN: tl.constexpr,
    INTERPRET: tl.constexpr, PDL: tl.constexpr = False, TRIGGER: tl.constexpr = False,
):
    """Program (b, tile): batch row b, indices ``8 RT tile .. + 8 RT`` of T. ``p_x``: int32 view
    of bf16 x [B, K] (s_xb in words); ``p_w``: int32 view of the packed rows [V, K/2] (s_wn in
    words); ``p_s``: int16 view of the E4M3 scales [V, K/16] (s_sn in int16); ``p_gs``: the fp32
    global scale. BIAS: scatter ``values + alpha * dot`` into logits (``p_out``) at the indices;
    else store the dots (NaN for an index outside [0, V)) to out[b, t]. Each index sits on both
    row halves of a tile (rows g: the first half of K against B column 0, rows g + 8: the second
    half against column 1), so a tile of T = 8 decodes no empty rows and a row's chunks take half
    as long. LEAN: the scale pair convert, and where every chunk a warp computes is a whole valid
    one (``UNMASKED``) loads without masks and no prefetch past a warp's last chunk. PDL (a
    launch with ``launch_pdl=True``): nothing global is touched before ``griddepcontrol.wait``
    (the previous kernel may have written x, the indices, the values or the logits); TRIGGER:
    then let the next PDL launch of the stream place its CTAs while this grid runs."""
    if PDL:
        gdc_wait()
    if TRIGGER:
        gdc_launch_dependents()
    NT: tl.constexpr = 32 * W
    NSEG: tl.constexpr = K // 32  # 16-byte segments a row
    NCH: tl.constexpr = (NSEG + 3) // 4  # 128-element chunks a row
    NCH_RUN: tl.constexpr = (NCH + 1) // 2  # chunks a half
    HALF: tl.constexpr = 4 * ((NCH + 1) // 2)  # the first segment of the second half
    # no partial chunk, halves of equal length, every warp the same number of chunks
    UNMASKED: tl.constexpr = LEAN and NSEG % 4 == 0 and NCH % 2 == 0 and NCH_RUN % W == 0
    i_b = tl.program_id(0).to(tl.int64)
    i_t = tl.program_id(1)
    o_e = tl.arange(0, NT)
    warp = o_e // 32
    lane = o_e % 32
    g = lane // 4
    t = lane % 4
    rows = ()
    m_rows = ()
    for h in tl.static_range(2 * RT):  # h = 2 rt + (0: row g, 1: row g + 8), both the same index
        tr = i_t * (8 * RT) + 8 * (h // 2) + g
        idx = tl.load(p_idx + i_b * s_ib + tr * s_it, mask=tr < T, other=-1).to(tl.int64)
        ok = (tr < T) & (idx >= 0) & (idx < V)  # an out-of-range index reads nothing
        rows = rows + (tl.where(ok, idx, 0),)
        m_rows = m_rows + (ok,)
    # the epilogue's indices and values (lanes t = 0 of the [32] lane set), loaded before the loop
    o_l = tl.arange(0, 32)
    e_idx = ()
    e_ok = ()
    e_val = ()
    e_tr = ()
    for h in tl.static_range(RT):
        tr = i_t * (8 * RT) + 8 * h + o_l // 4
        m_t = (tr < T) & (o_l % 4 == 0)
        idx = tl.load(p_idx + i_b * s_ib + tr * s_it, mask=m_t, other=-1).to(tl.int64)
        ok = m_t & (idx >= 0) & (idx < V)
        e_idx = e_idx + (idx,)
        e_ok = e_ok + (ok,)
        e_tr = e_tr + (tr,)
        if BIAS:
            e_val = e_val + (tl.load(p_val + i_b * s_vb + tr * s_vt, mask=ok, other=0).to(tl.float32),)
    z = tl.zeros([NT], dtype=tl.float32)
    acc = zeros_tuple(((z, z, z, z), (z, z, z, z)), RT)
    # the weights of the next chunk and x one chunk ahead (L1 / L2 hits) in flight; deeper rings
    # and Triton's software pipeliner (cp.async into shared memory) measured no faster
    # (docs/design-notes.md)
    if UNMASKED:
        # every load is of a chunk the warp computes: the last step is peeled (no prefetch past
        # the end, which would cost a load a warp still waits for at exit)
        N_IT: tl.constexpr = NCH_RUN // W
        wq = _load_weights(p_w, p_s, rows, m_rows, warp, t, s_wn, s_sn, NSEG, HALF, RT, NT, True)
        xs = _load_x(p_x, i_b, warp, g, t, s_xb, NSEG, HALF, NT, True)
        for it in range(0, N_IT - 1):
            nw = _load_weights(p_w, p_s, rows, m_rows, warp + (it + 1) * W, t, s_wn, s_sn, NSEG, HALF, RT, NT, True)
            nx = _load_x(p_x, i_b, warp + (it + 1) * W, g, t, s_xb, NSEG, HALF, NT, True)
            acc = _compute_chunk(acc, wq, xs, RT, NT, INTERPRET, LEAN)
            wq = nw
            xs = nx
        acc = _compute_chunk(acc, wq, xs, RT, NT, INTERPRET, LEAN)
    else:
        wq = _load_weights(p_w, p_s, rows, m_rows, warp, t, s_wn, s_sn, NSEG, HALF, RT, NT, False)
        xs = _load_x(p_x, i_b, warp, g, t, s_xb, NSEG, HALF, NT, False)
        for it in range(0, tl.cdiv(NCH_RUN, W)):
            nw = _load_weights(p_w, p_s, rows, m_rows, (it + 1) * W + warp, t, s_wn, s_sn, NSEG, HALF, RT, NT, False)
            nx = _load_x(p_x, i_b, (it + 1) * W + warp, g, t, s_xb, NSEG, HALF, NT, False)
            acc = _compute_chunk(acc, wq, xs, RT, NT, INTERPRET, LEAN)
            wq = nw
            xs = nx
    # the warps' sums -> one lane set. Lanes t = 0 hold column 0 in c0 (row g) / c2 (row g + 8)
    # and column 1 in c1 / c3: a row's dot is c0 (first half) + c3 (second half)
    gs = tl.load(p_gs) * _UNDO_SCALE
    for h in tl.static_range(RT):
        ca, cb = acc[h]
        c = (ca[0] + cb[0]) + (ca[3] + cb[3])
        dot = tl.sum(tl.reshape(c, [W, 32]), axis=0) * gs
        ok = e_ok[h]
        if BIAS:
            res = e_val[h] + alpha * dot
            tl.store(p_out + i_b * s_ob + e_idx[h] * s_ot, cast_rne(res, p_out.dtype.element_ty, INTERPRET), mask=ok)
        else:
            tr = e_tr[h]
            tl.store(p_out + i_b * s_ob + tr * s_ot, tl.where(ok, dot, float("nan")), mask=(tr < T) & (o_l % 4 == 0))


def pick_config(b: int, t: int, k: int) -> tuple[int, int]:
    """(RT row tiles a program, W warps splitting K), from same-run sweeps on the H200 (V = 131072,
    K in {256, 1024, 4096}, B in {1, 16, 64, 256}, T in {8, 32, 64}; docs/gathered.md): one or two
    chunks a warp and a half (K256: 1 warp, K1024: 4, K4096: 8); RT = 2 at B*T >= 16384 below
    K = 4096 (K256 B256 T64: 2.66 against 2.87 us for RT = 1), with the warps of RT = 1 (K1024
    B256 T64: 6.18 us against 6.52 with half of them)."""
    nch = -(-k // 128)
    half = -(-nch // 2)
    w = 1 << min(3, max(0, half.bit_length() - 1))  # the largest power of two <= half, at most 8
    rt = 2 if b * t >= 16384 and nch < 32 else 1
    return rt, w


def use_lean(k: int) -> bool:
    """Whether a launch runs the ``LEAN`` kernel (the scale pair convert, unmasked loads): at
    least 4 chunks a K half (K >= 1024). Against the plain kernel on the 36 benchmark shapes:
    5-11% faster at K = 4096, equal to 6% faster at K = 1024, 0-3% slower at K = 256 (one chunk a
    warp; docs/gathered.md)."""
    chunks = -(-k // 128)  # 128-element chunks a row
    return -(-chunks // 2) >= 4


def use_trigger(b: int, t: int, k: int) -> bool:
    """Whether a launch triggers its dependents early: at K >= 2048, or when the gathered rows
    hold under 2 MB. Same-run A/B on the 36 benchmark shapes: 5-15% faster on 32 of them, 3-10%
    slower on the four with K <= 1024 and >= 2.36 MB of rows, where the next grid's CTAs, placed
    early, take room from this one's remaining programs (docs/gathered.md)."""
    return k >= 2048 or b * t * (k // 2 + k // 16) < 2 * 2**20


def launch(x, data, scale, global_scale, index, k, out, values, alpha, bias, config=None) -> None:
    """Run the kernel (operands as ``dispatch`` accepts them: bf16 x, K % 32 == 0, contiguous
    16-byte aligned rows of x / the packed data, 2-byte aligned scale rows). ``out``: fp32 [B, T]
    dots, or (``bias``) the logits that receive ``values + alpha * dot`` at the indices.
    ``config`` = (RT, W) overrides :func:`pick_config`. Launched as a programmatic dependent
    launch (the CTAs are placed while the previous kernel drains: 0.1-0.25 us faster on every
    benchmark shape), with the early trigger where :func:`use_trigger` says."""
    b, t = index.shape
    if b == 0 or t == 0:
        return
    if config is not None and len(config) != 2:
        raise ValueError(f"gathered MMA config is (RT, W), got {tuple(config)}")
    rt, w = tuple(config) if config is not None else pick_config(b, t, k)
    if rt not in (1, 2) or w < 1 or w & (w - 1):
        raise ValueError(f"gathered MMA config (RT, W) needs RT in (1, 2) and W a power of two, got {(rt, w)}")
    x32 = x.view(torch.int32)
    w32 = data.view(torch.int32)
    s16 = scale.view(torch.int16)
    p_val = values if bias else out
    s_vb, s_vt = (values.stride(0), values.stride(1)) if bias else (0, 0)
    grid = (b, triton.cdiv(t, 8 * rt))
    _gathered_mma_kernel[grid](
        x32, w32, s16, global_scale, index, p_val, out, t, data.shape[0], float(alpha),
        x32.stride(0), w32.stride(0), s16.stride(0), index.stride(0), index.stride(1), s_vb, s_vt,
        out.stride(0), out.stride(1),
        K=k, BIAS=bias, RT=rt, W=w, LEAN=use_lean(k), INTERPRET=interpret_mode(),
        num_warps=w, num_stages=1, **launch_options(x.device, True, use_trigger(b, t, k), None),
    )
