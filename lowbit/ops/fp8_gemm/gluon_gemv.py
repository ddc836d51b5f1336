"""The FP4 decode GEMV of ``triton_mma.py`` with its operands staged through shared memory by
``cp.async`` (Gluon): ``fp4_gemm`` at M <= 16 (FP8 activations x packed E2M1 weights).

Why: the register-fed kernel (``triton_mma.mma_gemv``) loads every lane's own fragment words
straight from global memory — eight 4-byte loads a 16 x 128 weight tile (each warp instruction
touches 8 rows x 16 bytes) and, at M = 16, eight 8-byte activation loads. Nsight Compute on the
H200 (docs/gemm.md, "eleventh session") puts the L1 data pipe at 56% (M = 1) / 71% (M = 16) of
its peak in LSU wavefronts, with the warps stalled on their loads at 20-29% occupancy: the
loads, not the MMAs or the decode, bound it, and blocks in flight cost registers. Triton's own
software pipeliner moved the same 4-byte loads into ``cp.async`` but kept them 4 bytes wide and
read them back with 8-way bank conflicts, and was 1.3-3x slower.

Here each K block's weight tile, activation tile and group scales are copied into shared memory
``STAGES - 1`` iterations ahead with 16-byte ``cp.async`` (each warp instruction: 8 rows x 64
contiguous bytes, no registers held while in flight), and each lane then reads exactly its
fragment words back from a layout with no bank conflicts:

* **weight** [STAGES, 4 (group s), W (warp), 16 RT (row), 4 (word)] int32: the sub-buffer of group s
  holds bytes ``16 s .. 16 s + 15`` of every row of the block (its 32 codes). Lane (g, t) copies
  group t of row g (global: 4 lanes x 16 bytes = the row's 64 bytes); it reads word t of group
  s of rows g, g + 8 (the A fragment of MMA s, as in ``triton_mma``: bytes ``16 s + 4 t``): for
  one (s, row half) the 32 lanes read 32 consecutive words. Eight words of padding after every
  group sub-buffer put the four sub-buffers' rows on different banks for the copies.
* **activations** [STAGES, 4 (s), W, 8 NCT (row), 8 (word)]: group s's 32 bytes of every row
  (rows >= M zero-filled); lane (g, t) reads words 2 t, 2 t + 1 of row g (+ 8 per column tile),
  the bytes ``32 s + 8 t .. + 7`` its B fragment needs.
* **group scales** [STAGES, W, 32]: the row's UE8M0 word of the block (bytes s = 0..3).

One ``cp.async.wait_group`` and one CTA barrier per iteration (W blocks, one per warp): after it
every copy of the iteration's stage is visible and every warp has finished reading the stage
the iteration refills. The MMAs, the decode (E2M1 -> E4M3 bytes, or straight to fp16 bits) and
the scale arithmetic are ``triton_mma``'s, bit for bit; so is the result. The activation scales
are plain loads (tiny and L1-resident).

Gluon does not run under ``TRITON_INTERPRET``: this kernel is tested on the GPU tier only
(tests/ops/test_gluon_gemv.py), and ``scripts/gluon_gemv_offline.py`` compiles it for sm_90
without a GPU.
"""
from __future__ import annotations

import torch
import triton

from lowbit.ops.fp8_gemm.triton_mma import _MMA_E4M3_PTX, _MMA_F16_GROUP_PTX, FP4_RESULT_SCALE

try:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.ampere import async_copy

    _GLUON_IMPORT_ERROR = None
except Exception as e:  # noqa: BLE001 - any failure means "no Gluon path"
    _GLUON_IMPORT_ERROR = e

__all__ = ["gluon_gemv", "gluon_gemv_ok", "pick_gluon_gemv_config"]

#: most activation rows one launch serves (two 8-column MMA tiles)
GLUON_GEMV_MAX_M = 16


if _GLUON_IMPORT_ERROR is None:
    _MAG_LO = gl.constexpr(0x1C1C1C1C)  # E4M3 bits 2..4 of every byte: the E2M1 magnitude, placed
    _MAG_F16 = gl.constexpr(0x0E0E0E0E)  # fp16 high byte: exponent low bits + top mantissa bit
    _SIGN = gl.constexpr(-0x7F7F7F80)  # 0x80808080 as int32
    _EXP_BITS = gl.constexpr(0x7F800000)
    _F32_2M127 = gl.constexpr(0x00400000)  # 2^-127, the subnormal UE8M0 byte 0 stands for

    @gluon.jit
    def _mma16832(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
        return gl.inline_asm_elementwise(_MMA_E4M3_PTX, "=f,=f,=f,=f,r,r,r,r,r,r,0,1,2,3",
                                         [a0, a1, a2, a3, b0, b1, c0, c1, c2, c3],
                                         dtype=(gl.float32, gl.float32, gl.float32, gl.float32), is_pure=True,
                                         pack=1)

    @gluon.jit
    def _mma_group_f16(a0, a1, a2, a3, a4, a5, a6, a7, b0, b1, b2, b3):
        return gl.inline_asm_elementwise(_MMA_F16_GROUP_PTX, "=f,=f,=f,=f,r,r,r,r,r,r,r,r,r,r,r,r",
                                         [a0, a1, a2, a3, a4, a5, a6, a7, b0, b1, b2, b3],
                                         dtype=(gl.float32, gl.float32, gl.float32, gl.float32), is_pure=True,
                                         pack=1)

    @gluon.jit
    def _even_odd_bytes(lo, hi):
        ev = gl.inline_asm_elementwise("prmt.b32 $0, $1, $2, 0x6420;", "=r,r,r", [lo, hi], dtype=gl.int32,
                                       is_pure=True, pack=1)
        od = gl.inline_asm_elementwise("prmt.b32 $0, $1, $2, 0x7531;", "=r,r,r", [lo, hi], dtype=gl.int32,
                                       is_pure=True, pack=1)
        return ev, od

    @gluon.jit
    def _e4m3_f16_pairs(w):
        return gl.inline_asm_elementwise(
            "{.reg .b16 l, h; mov.b32 {l, h}, $2; cvt.rn.f16x2.e4m3x2 $0, l; cvt.rn.f16x2.e4m3x2 $1, h;}",
            "=r,=r,r", [w], dtype=(gl.int32, gl.int32), is_pure=True, pack=1)

    @gluon.jit
    def _f16_pairs(hb):
        return gl.inline_asm_elementwise("{prmt.b32 $0, $2, 0, 0x1404; prmt.b32 $1, $2, 0, 0x3424;}", "=r,=r,r",
                                         [hb], dtype=(gl.int32, gl.int32), is_pure=True, pack=1)

    @gluon.jit
    def _scale_of(v, SHIFT: gl.constexpr):
        """Byte (SHIFT) of the UE8M0 word ``v`` as the fp32 2^(e - 127) (``triton_mma._fp4_group_scales``)."""
        if SHIFT >= 0:
            e = (v << SHIFT) & _EXP_BITS
        else:
            e = (v >> (-SHIFT)) & _EXP_BITS
        return gl.maximum(e, _F32_2M127).to(gl.float32, bitcast=True)

    @gluon.jit
    def _group(q0, q1, xe, xo, s0, s1, c, F16: gl.constexpr):
        """One group (MMA) of a 16-row tile: rows (g, g + 8) words q0 / q1, the column tile's
        B words (e4m3 path: even / odd bytes; f16 path: the 4 f16x2 words as a tuple in ``xe``),
        the sum scaled by the rows' group scales into the accumulator tuple ``c``."""
        if F16:
            e0 = ((q0 << 4) & _SIGN) | ((q0 << 1) & _MAG_F16)
            o0 = (q0 & _SIGN) | ((q0 >> 3) & _MAG_F16)
            e1 = ((q1 << 4) & _SIGN) | ((q1 << 1) & _MAG_F16)
            o1 = (q1 & _SIGN) | ((q1 >> 3) & _MAG_F16)
            e0a, e0b = _f16_pairs(e0)
            e1a, e1b = _f16_pairs(e1)
            o0a, o0b = _f16_pairs(o0)
            o1a, o1b = _f16_pairs(o1)
            d0, d1, d2, d3 = _mma_group_f16(e0a, e1a, e0b, e1b, o0a, o1a, o0b, o1b, xe[0], xe[1], xe[2], xe[3])
        else:
            z = gl.zeros_like(s0)
            d0, d1, d2, d3 = _mma16832(((q0 << 2) & _MAG_LO) | ((q0 << 4) & _SIGN),
                                       ((q1 << 2) & _MAG_LO) | ((q1 << 4) & _SIGN),
                                       ((q0 >> 2) & _MAG_LO) | (q0 & _SIGN),
                                       ((q1 >> 2) & _MAG_LO) | (q1 & _SIGN), xe, xo, z, z, z, z)
        return c[0] + s0 * d0, c[1] + s0 * d1, c[2] + s1 * d2, c[3] + s1 * d3

    @gluon.jit
    def _x_words(xbuf, s: gl.constexpr, ct: gl.constexpr, NCT: gl.constexpr, W: gl.constexpr, F16: gl.constexpr):
        """The B words of group s, column tile ct, from the stage's activation buffer."""
        lane: gl.constexpr = gl.BlockedLayout([1, 1, 1], [1, 8, 4], [W, 1, 1], [2, 1, 0])  # [W, 8 (g), 4 (t)]: warp w, lane 4 g + t
        x2: gl.constexpr = gl.BlockedLayout([1, 1, 2], [1, 8, 4], [W, 1, 1], [2, 1, 0])
        v = xbuf.index(s * NCT + ct).load(x2)  # [W, 8, 8]: words 2t, 2t + 1 of row g
        lo, hi = gl.split(gl.reshape(v, [W, 8, 4, 2]))
        lo = gl.convert_layout(lo, lane)
        hi = gl.convert_layout(hi, lane)
        ev, od = _even_odd_bytes(lo, hi)
        if F16:
            e02, e46 = _e4m3_f16_pairs(ev)
            o13, o57 = _e4m3_f16_pairs(od)
            return (e02, e46, o13, o57), od
        else:
            return ev, od

    @gluon.jit
    def _issue_stage(j, w_buf, x_buf, s_buf, b_ptr, a_ptr, bs_ptr, w_off, w_ok, x_off, x_ok, s_off, s_ok,
                     w_kb, x_kb, s_kb, n_it, W: gl.constexpr, KB: gl.constexpr):
        """cp.async of iteration j's blocks (block j W + w for warp w) into one stage's buffers;
        blocks past K and iterations past the loop are masked (zero-filled, never read)."""
        live = j < n_it
        kb_w = j * W + w_kb
        async_copy.async_copy_global_to_shared(w_buf, b_ptr + (w_off + kb_w * 16), mask=w_ok & (kb_w < KB) & live)
        kb_x = j * W + x_kb
        async_copy.async_copy_global_to_shared(x_buf, a_ptr + (x_off + kb_x * 32), mask=x_ok & (kb_x < KB) & live)
        kb_s = j * W + s_kb
        async_copy.async_copy_global_to_shared(s_buf, bs_ptr + (s_off + kb_s), mask=s_ok & (kb_s < KB) & live)
        async_copy.commit_group()

    @gluon.jit
    def _compute_stage(acc, nan_rows, it, wbuf, xbuf, sbuf, as_ptr, M, w_, t_, zf, KB: gl.constexpr,
                       AS_E8M0: gl.constexpr, RT: gl.constexpr, NCT: gl.constexpr, W: gl.constexpr,
                       F16: gl.constexpr):
        """acc += the MMAs of iteration it's blocks, read from one stage's buffers."""
        lane: gl.constexpr = gl.BlockedLayout([1, 1, 1], [1, 8, 4], [W, 1, 1], [2, 1, 0])
        # read views whose layout has the rank of one sub-buffer (what ``index`` hands a load)
        wbuf = wbuf._reinterpret(gl.int32, wbuf.shape, gl.SwizzledSharedLayout(1, 1, 1, [2, 1, 0]))
        xbuf = xbuf._reinterpret(gl.int32, xbuf.shape, gl.SwizzledSharedLayout(1, 1, 1, [2, 1, 0]))
        sbuf = sbuf._reinterpret(gl.int32, sbuf.shape, gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
        kb = it * W + w_
        m_k = kb < KB
        for ct in gl.static_range(NCT):
            ca = 2 * t_ + 8 * ct  # activation rows of this lane's C values: ca, ca + 1
            if AS_E8M0:
                e0 = gl.load(as_ptr + ca * KB + kb, mask=m_k & (ca < M), other=127).to(gl.int32)
                e1 = gl.load(as_ptr + (ca + 1) * KB + kb, mask=m_k & (ca + 1 < M), other=127).to(gl.int32)
                sa0 = gl.where(e0 == 255, float("nan"), gl.maximum(e0 << 23, _F32_2M127).to(gl.float32, bitcast=True))
                sa1 = gl.where(e1 == 255, float("nan"), gl.maximum(e1 << 23, _F32_2M127).to(gl.float32, bitcast=True))
            else:
                sa0 = gl.load(as_ptr + ca * KB + kb, mask=m_k & (ca < M), other=1.0)
                sa1 = gl.load(as_ptr + (ca + 1) * KB + kb, mask=m_k & (ca + 1 < M), other=1.0)
            xw = ()
            for s in gl.static_range(4):
                xw = xw + (_x_words(xbuf, s, ct, NCT, W, F16),)
            for rt in gl.static_range(RT):
                v0 = gl.expand_dims(sbuf.index(2 * rt).load(gl.SliceLayout(2, lane)), 2)
                v1 = gl.expand_dims(sbuf.index(2 * rt + 1).load(gl.SliceLayout(2, lane)), 2)
                c = (zf, zf, zf, zf)
                for s in gl.static_range(4):
                    q0 = wbuf.index(s * 2 * RT + 2 * rt).load(lane)
                    q1 = wbuf.index(s * 2 * RT + 2 * rt + 1).load(lane)
                    c = _group(q0, q1, xw[s][0], xw[s][1], _scale_of(v0, 23 - 8 * s), _scale_of(v1, 23 - 8 * s), c,
                               F16)
                a = acc[rt * NCT + ct]
                acc = _tuple_set(acc, rt * NCT + ct,
                                 (a[0] + sa0 * c[0], a[1] + sa1 * c[1], a[2] + sa0 * c[2], a[3] + sa1 * c[3]))
                if ct == 0:
                    nan_rows = _tuple_set(nan_rows, 2 * rt, nan_rows[2 * rt] | ((~v0 - 0x01010101) & v0 & _SIGN))
                    nan_rows = _tuple_set(nan_rows, 2 * rt + 1,
                                          nan_rows[2 * rt + 1] | ((~v1 - 0x01010101) & v1 & _SIGN))
        return acc, nan_rows

    @gluon.jit(do_not_specialize=["M", "n_it"])
    def _fp4_gemv_kernel(a_ptr, as_ptr, b_ptr, bs_ptr, c_ptr, M, N, n_it, K: gl.constexpr, SCALE: gl.constexpr,
                         AS_E8M0: gl.constexpr, RT: gl.constexpr, NCT: gl.constexpr, W: gl.constexpr,
                         STAGES: gl.constexpr, F16: gl.constexpr):
        """Program: 16 RT weight rows x the M <= 8 NCT activation rows; warp w takes K blocks
        w, w + W, ... ``a_ptr``: int32 view of the E4M3 activations [M, K]; ``b_ptr``: int32 view
        of the packed weight [N, K/2]; ``bs_ptr``: int32 view of its UE8M0 scales [N, K/32]
        (word kb = the 4 group scales of block kb); ``as_ptr``: activation scales [M, K/128]."""
        KB: gl.constexpr = K // 128
        KW: gl.constexpr = K // 8  # int32 words per weight row
        AW: gl.constexpr = K // 4  # int32 words per activation row
        R: gl.constexpr = 16 * RT
        lane: gl.constexpr = gl.BlockedLayout([1, 1, 1], [1, 8, 4], [W, 1, 1], [2, 1, 0])  # [W, 8 (g), 4 (t)]: warp w, lane 4 g + t
        # plain row-major buffers (the copy and read lane maps below are bank-conflict free)
        w_sl: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [3, 2, 1, 0])
        x_sl: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [3, 2, 1, 0])
        s_sl: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [2, 1, 0])
        # one allocation per stage, the K loop unrolled STAGES times: every buffer index is a
        # compile-time constant
        w_bufs = ()
        x_bufs = ()
        s_bufs = ()
        for i in gl.static_range(STAGES):
            w_bufs = w_bufs + (gl.allocate_shared_memory(gl.int32, [8 * RT, W, 8, 4], w_sl),)
            x_bufs = x_bufs + (gl.allocate_shared_memory(gl.int32, [4 * NCT, W, 8, 8], x_sl),)
            s_bufs = s_bufs + (gl.allocate_shared_memory(gl.int32, [4, W, 8], s_sl),)

        row0 = gl.program_id(0).to(gl.int64) * R
        # copy addresses (word offsets without the block) and masks, loop-invariant. Weight
        # buffer element (s 2RT + h, w, g, j): word 4 s + j of row 8 h + g; lane (g, t) copies
        # 16 bytes of leading index t (+ 4, ...), so a warp instruction reads full 32-byte sectors
        wcp: gl.constexpr = gl.BlockedLayout([1, 1, 1, 4], [4, 1, 8, 1], [1, W, 1, 1], [3, 2, 1, 0])
        w_i, w_w, w_g, w_j = _index4(8 * RT, W, 8, 4, wcp)
        w_row = row0 + 8 * (w_i % (2 * RT)) + w_g
        w_off = w_row * KW + (w_i // (2 * RT)) * 4 + w_j + w_w * 0
        w_ok = (w_row < N) & (w_j >= 0) & (w_w >= 0)
        w_kb = w_w
        # activation buffer element (s NCT + ct, w, g, j): word 8 s + j of row 8 ct + g; lanes
        # 2i, 2i + 1 copy the two halves of one 32-byte group piece
        xcp: gl.constexpr = gl.BlockedLayout([1, 1, 1, 4], [2, 1, 8, 2], [1, W, 1, 1], [3, 2, 1, 0])
        x_i, x_w, x_g, x_j = _index4(4 * NCT, W, 8, 8, xcp)
        x_row = 8 * (x_i % NCT) + x_g
        x_off = x_row.to(gl.int64) * AW + (x_i // NCT) * 8 + x_j + x_w * 0
        x_ok = (x_row < M) & (x_j >= 0) & (x_w >= 0)
        x_kb = x_w
        # scale buffer element (h, w, g): the block's scale word of row 8 h + g (h < 2 RT)
        scp: gl.constexpr = gl.BlockedLayout([1, 1, 1], [4, 1, 8], [1, W, 1], [2, 1, 0])
        s_h = gl.expand_dims(gl.expand_dims(gl.arange(0, 4, layout=gl.SliceLayout(1, gl.SliceLayout(2, scp))), 1), 2)
        s_w = gl.expand_dims(gl.expand_dims(gl.arange(0, W, layout=gl.SliceLayout(0, gl.SliceLayout(2, scp))), 0), 2)
        s_g = gl.expand_dims(gl.expand_dims(gl.arange(0, 8, layout=gl.SliceLayout(0, gl.SliceLayout(1, scp))), 0), 1)
        s_row = row0 + 8 * s_h + s_g
        s_off = s_row * KB + s_w * 0
        s_ok = (s_h < 2 * RT) & (s_row < N) & (s_w >= 0)
        s_kb = s_w

        # per-lane indices for the MMA operands and the activation scales
        t_ = gl.expand_dims(gl.expand_dims(gl.arange(0, 4, layout=gl.SliceLayout(0, gl.SliceLayout(1, lane))), 0), 1)
        w_ = gl.expand_dims(gl.expand_dims(gl.arange(0, W, layout=gl.SliceLayout(1, gl.SliceLayout(2, lane))), 1), 2)
        zf = gl.zeros([W, 8, 4], gl.float32, lane)
        acc = ()
        for i in gl.static_range(RT * NCT):
            acc = acc + ((zf, zf, zf, zf),)
        zi = gl.zeros([W, 8, 4], gl.int32, lane)
        nan_rows = ()
        for i in gl.static_range(2 * RT):
            nan_rows = nan_rows + (zi,)

        # n_it = cdiv(KB, W) arrives as a run-time value: with it constant, iterations the
        # unrolled loop provably skips crash Triton 3.6's lowering (n_it < STAGES)
        for j in gl.static_range(STAGES - 1):
            _issue_stage(j, w_bufs[j], x_bufs[j], s_bufs[j], b_ptr, a_ptr, bs_ptr, w_off, w_ok, x_off, x_ok, s_off,
                         s_ok, w_kb, x_kb, s_kb, n_it, W, KB)
        for it0 in range(0, n_it, STAGES):
            for u in gl.static_range(STAGES):
                it = it0 + u
                if it < n_it:
                    # iteration it's copies are done (this thread's), and after the barrier
                    # everyone's; every warp has also finished reading the stage refilled next
                    async_copy.wait_group(STAGES - 2)
                    gl.thread_barrier()
                    nxt: gl.constexpr = (u + STAGES - 1) % STAGES
                    _issue_stage(it + STAGES - 1, w_bufs[nxt], x_bufs[nxt], s_bufs[nxt], b_ptr, a_ptr, bs_ptr, w_off,
                                 w_ok, x_off, x_ok, s_off, s_ok, w_kb, x_kb, s_kb, n_it, W, KB)
                    acc, nan_rows = _compute_stage(acc, nan_rows, it, w_bufs[u], x_bufs[u], s_bufs[u], as_ptr, M, w_,
                                                   t_, zf, KB, AS_E8M0, RT, NCT, W, F16)
        async_copy.wait_group(0)

        # the warps' partial sums -> rows g (+ 8), columns 2t (+ 1) of each tile
        out_l: gl.constexpr = gl.SliceLayout(0, lane)
        g2 = gl.expand_dims(gl.arange(0, 8, layout=gl.SliceLayout(1, out_l)), 1)
        t2 = gl.expand_dims(gl.arange(0, 4, layout=gl.SliceLayout(0, out_l)), 0)
        for rt in gl.static_range(RT):
            f0 = gl.max(nan_rows[2 * rt], axis=0) != 0
            f1 = gl.max(nan_rows[2 * rt + 1], axis=0) != 0
            row = row0 + 16 * rt + g2
            for ct in gl.static_range(NCT):
                a = acc[rt * NCT + ct]
                col = 2 * t2 + 8 * ct
                v0 = gl.where(f0, float("nan"), gl.sum(a[0], axis=0) * SCALE)
                v1 = gl.where(f0, float("nan"), gl.sum(a[1], axis=0) * SCALE)
                v2 = gl.where(f1, float("nan"), gl.sum(a[2], axis=0) * SCALE)
                v3 = gl.where(f1, float("nan"), gl.sum(a[3], axis=0) * SCALE)
                r0 = row < N
                r1 = row + 8 < N
                m0 = col < M
                m1 = col + 1 < M
                gl.store(c_ptr + col * N + row, v0.to(gl.bfloat16), mask=m0 & r0)
                gl.store(c_ptr + (col + 1) * N + row, v1.to(gl.bfloat16), mask=m1 & r0)
                gl.store(c_ptr + col * N + row + 8, v2.to(gl.bfloat16), mask=m0 & r1)
                gl.store(c_ptr + (col + 1) * N + row + 8, v3.to(gl.bfloat16), mask=m1 & r1)

    @gluon.jit
    def _index4(D0: gl.constexpr, D1: gl.constexpr, D2: gl.constexpr, D3: gl.constexpr, layout: gl.constexpr):
        """The four index tensors of a [D0, D1, D2, D3] tensor in ``layout``, each broadcastable."""
        l3: gl.constexpr = gl.SliceLayout(3, layout)
        i0 = gl.arange(0, D0, layout=gl.SliceLayout(1, gl.SliceLayout(2, l3)))
        i1 = gl.arange(0, D1, layout=gl.SliceLayout(0, gl.SliceLayout(2, l3)))
        i2 = gl.arange(0, D2, layout=gl.SliceLayout(0, gl.SliceLayout(1, l3)))
        i3 = gl.arange(0, D3, layout=gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(2, layout))))
        return (gl.expand_dims(gl.expand_dims(gl.expand_dims(i0, 1), 2), 3),
                gl.expand_dims(gl.expand_dims(gl.expand_dims(i1, 0), 2), 3),
                gl.expand_dims(gl.expand_dims(gl.expand_dims(i2, 0), 1), 3),
                gl.expand_dims(gl.expand_dims(gl.expand_dims(i3, 0), 1), 2))

    @gluon.jit
    def _tuple_set(tup, i: gl.constexpr, v):
        """``tup`` with element i replaced by v (compile-time index)."""
        res = ()
        for j in gl.static_range(len(tup)):
            if j == i:
                res = res + (v,)
            else:
                res = res + (tup[j],)
        return res


def pick_gluon_gemv_config(n: int, k: int, m: int = 1) -> tuple[int, int, int]:
    """(RT row tiles a program, W warps splitting K, STAGES). Placeholder until the H200 sweep of
    ``scripts/bench_mma_gemv.py --gluon`` picks per shape: ``triton_mma.pick_mma_config``'s
    (RT, W) and 4 stages."""
    from lowbit.ops.fp8_gemm.triton_mma import pick_mma_config

    rt, w = pick_mma_config(n, k, m, True)
    return rt, w, 4


def gluon_gemv_ok(a: torch.Tensor, b: torch.Tensor, b_s: torch.Tensor) -> bool:
    """Whether :func:`gluon_gemv` can run these operands: Gluon importable, CUDA sm_90+,
    1 <= M <= 16, 16-byte aligned storage."""
    if _GLUON_IMPORT_ERROR is not None or not a.is_cuda:
        return False
    if not 1 <= a.shape[0] <= GLUON_GEMV_MAX_M or any(t.data_ptr() % 16 for t in (a, b, b_s)):
        return False
    return torch.cuda.get_device_capability(a.device)[0] >= 9


def gluon_gemv(a: torch.Tensor, a_s: torch.Tensor, b: torch.Tensor, b_s: torch.Tensor,
               config: tuple[int, int, int] | None = None, out: torch.Tensor | None = None,
               decode: str | None = None) -> torch.Tensor:
    """``fp4_gemm`` at decode sizes: a e4m3 [M, K] (1 <= M <= 16, K % 128 == 0, contiguous), a_s
    [M, K/128] fp32 or float8_e8m0fnu; b packed E2M1 uint8 [N, K/2] with UE8M0 uint8 b_s [N, K/32],
    contiguous. Returns bf16 [M, N] (``out`` if given). ``config`` = (RT, W, STAGES): RT in (1, 2),
    W a power of two, STAGES >= 2; ``decode``: "e4m3" or "f16" (bit-identical; default: "f16"
    from M > 8, as ``triton_mma``)."""
    if _GLUON_IMPORT_ERROR is not None:
        raise RuntimeError(f"gluon_gemv needs triton.experimental.gluon: {_GLUON_IMPORT_ERROR}")
    m, k = a.shape
    n = b.shape[0]
    if not 1 <= m <= GLUON_GEMV_MAX_M or k % 128:
        raise ValueError(f"gluon_gemv serves 1 <= M <= {GLUON_GEMV_MAX_M} and K % 128 == 0, got a {tuple(a.shape)}")
    if b.shape != (n, k // 2) or b_s.shape != (n, k // 32):
        raise ValueError(f"gluon_gemv needs b [N, K/2] and b_s [N, K/32] for K = {k}, got {tuple(b.shape)} and "
                         f"{tuple(b_s.shape)}")
    rt, w, stages = config if config is not None else pick_gluon_gemv_config(n, k, m)
    if rt not in (1, 2) or w < 1 or w & (w - 1) or stages < 2:
        raise ValueError(f"gluon_gemv config (RT, W, STAGES) needs RT in (1, 2), W a power of two and STAGES >= 2, "
                         f"got {config}")
    decode = decode or ("f16" if m > 8 else "e4m3")
    if decode not in FP4_RESULT_SCALE:
        raise ValueError(f"gluon_gemv decode must be one of {sorted(FP4_RESULT_SCALE)}, got {decode!r}")
    c = torch.empty(m, n, dtype=torch.bfloat16, device=a.device) if out is None else out
    as_e8m0 = a_s.dtype == torch.float8_e8m0fnu
    a32 = a.view(torch.uint8).view(torch.int32)
    b32 = b.view(torch.uint8).view(torch.int32)
    bs32 = b_s.view(torch.uint8).view(torch.int32)
    asv = a_s.view(torch.uint8) if as_e8m0 else a_s
    grid = (triton.cdiv(n, 16 * rt),)
    _fp4_gemv_kernel[grid](a32, asv, b32, bs32, c, m, n, triton.cdiv(k // 128, w), k, SCALE=FP4_RESULT_SCALE[decode], AS_E8M0=as_e8m0, RT=rt,
                           NCT=-(-m // 8), W=w, STAGES=stages, F16=decode == "f16", num_warps=w)
    return c
