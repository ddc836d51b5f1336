"""Fast-mode coarse pass on Hopper's int8 wgmma (Gluon): INT2 / INT4 plane-split codes times int8
rows of x, for M = 1..64 rows of x in one launch.

Why: the ``mma.sync`` pass (``triton_mma.py``) serves 16 rows of x a launch and re-reads the
codes for every 16 more; at M = 64 the band kernels' bf16 ``tl.dot`` run at 0.68x cuBLAS bf16.
The head's product is 2 N K M operations (81 GFLOP for 124160 x 5120 at M = 64), too many for
bf16 tensor cores in the 3x-cuBLAS budget, but the integer codes multiply int8 x exactly at
twice the rate, and integer sums make the zero point exact:

    logit[m, n] = sx[m] * sum_{(s, j)} scale[n, g(s, j)] * (sum_k q[n, k] xq[m, k] - z[n, g] xsum[m, s, j])

over the 64-byte stages s of the packed rows and their P = 8 / bits planes j (one 64-wide K run
of one group each: g64-multiple groups). ``xq`` / ``sx`` / ``xsum``: ``x_int8.py``.

Program: ``R = 16 W`` consecutive tokens (the candidate block) against all NB (8..64) rows of x.
Per stage, TMA brings the tokens' 64 packed bytes, their P fp16 scales and the byte of their P
zero points (``wgmma_sz``) and the x tiles of the P planes into a ring of STAGES slots. Each warp
reads its A fragments of a 32-byte half straight from shared memory in the register layout of
``wgmma.m64nNk32.s8`` (lane (g, t):
bytes 4t..4t+3 and 16+4t.. of rows g and g+8), extracts plane j with one shift-and-mask per word
(the codes are already small non-negative int8), and issues two async wgmmas (the two halves,
K = 64) against the plane's x tiles (the B operand, K-major in shared memory). The int32 result
loses the zero point (``- z xsum``, exact), is converted and multiplied by the fp16 group scale
into the fp32 accumulator. At the end: times ``sx``, then the block's ``KCAND`` best keys per row
of x (ties to the lower token index; ``gluon_emit.py``) -- the same candidates contract as
``triton.py``'s ``_epilogue`` in fast mode. The weights' layouts (scales and zeros, the whole-row
variant's group codes) are built in plain torch by ``wgmma_pack.py``.

**Whole-row integer variant** (``TABLE``, INT2): the group scale is rounded to an integer multiple
of one fp32 unit per token row, ``s_g ~= A_g r_n`` (:func:`wgmma_table`, ``|A_g (q - z_g)| <= 127``),
so a code decodes straight to the int8 weight ``A_g (q - z_g)``: the group's 4 possible weights are
the bytes of one word, built from the group's 16-bit code ``A | (128 - A z) << 8`` (4 ops,
``_tables``; 2 bytes a group against the format's 3 of scale and zero), and ``prmt`` picks 4 of
them by 4 codes at once (``_prmt_word``: 9 ops for a packed word of 16 codes, the x tiles in the
matching K order of ``x_int8.prmt_source``). The row's
dot accumulates in int32 over all of K in one wgmma chain::

    logit[m, n] = sx[m] r[n] sum_k A_g(k) (q[n, k] - z[n, g(k)]) xq[m, k]

No per-group epilogue (the three ops per accumulator element and group above, which grow with M)
and no x sums: the decode is the only per-code work. The rounding of the scales is a further
approximation of fast mode's coarse logits (0.7% rms on SmolLM2's head; its fast-mode argmax
agreement and recall are unchanged, ``scripts/sim_table_coarse.py``).

Gluon does not run under ``TRITON_INTERPRET``: the kernel is tested on the GPU tier
(tests/ops/test_coarse_wgmma.py); its x preparation and packing layouts have CPU tests.
"""
from __future__ import annotations

import functools

import torch
import triton

from lowbit._backend import interpret_mode, sm_count
from lowbit.ops.coarse_head._state import device_state
from lowbit.ops.coarse_head.wgmma_pack import STAGE_BYTES as _STAGE_BYTES
from lowbit.ops.coarse_head.wgmma_pack import (TABLE_BITS, table_codes, table_coefficients, table_reference, wgmma_sz,
                                               wgmma_sz_bytes, wgmma_sz_views, wgmma_table)

try:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (
        fence_async_shared,
        mbarrier,
        tma,
        warpgroup_mma,
        warpgroup_mma_wait,
    )
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from lowbit.ops._gluon_pdl import gdc_launch_dependents, gdc_wait
    from lowbit.ops._gluon_wgmma import acc_layout, invalidate_ring_barriers, ring_barriers, warp_rows
    from lowbit.ops.coarse_head.gluon_emit import block_logits, emit_candidates

    _GLUON_IMPORT_ERROR = None
except Exception as e:  # noqa: BLE001 - any failure means "no Gluon path"
    _GLUON_IMPORT_ERROR = e

# the weights' layouts (``wgmma_pack``) are re-exported: the kernels' callers take them from here
__all__ = ["TABLE_BITS", "WGMMA_BITS", "WGMMA_MAX_M", "coarse_wgmma", "table_codes", "table_coefficients",
           "table_reference", "wgmma_available", "wgmma_sz", "wgmma_sz_views", "wgmma_table"]

#: most rows of x one launch serves (the wgmma's N)
WGMMA_MAX_M = 64
#: INTx widths the kernel decodes (INT8 would need x's int8 rounding to be small against the
#: weights' own error; it keeps the other paths)
WGMMA_BITS = (2, 4)


if _GLUON_IMPORT_ERROR is None:
    _F16_BITS = gl.constexpr(0xFFFF)
    _MAGIC_I = gl.constexpr(0x4B400000)  # fp32 bits of 1.5 * 2^23
    _MAGIC_F = gl.constexpr(12582912.0)

    @gluon.constexpr_function
    def _codes_layout(W):
        """uint8 [16 W, 32] (token, byte of a 32-byte half): lane (g, t) of warp w holds bytes
        4t..4t+3 and 16+4t..16+4t+3 of rows 16w + g and 16w + g + 8 -- the register A operand of
        ``wgmma.m64nNk32`` for 8-bit types."""
        return gl.DistributedLinearLayout(reg_bases=[[0, 1], [0, 2], [8, 0], [0, 16]],
                                          lane_bases=[[0, 4], [0, 8], [1, 0], [2, 0], [4, 0]],
                                          warp_bases=warp_rows(W), block_bases=[], shape=[16 * W, 32])

    # plane j's codes of a word of packed bytes, as 4 int8 (one shift-and-mask)
    _P0_2 = gl.constexpr("and.b32 $0, $1, 0x03030303;")
    _P1_2 = gl.constexpr("{.reg .b32 a; shr.u32 a, $1, 2; and.b32 $0, a, 0x03030303;}")
    _P2_2 = gl.constexpr("{.reg .b32 a; shr.u32 a, $1, 4; and.b32 $0, a, 0x03030303;}")
    _P3_2 = gl.constexpr("{.reg .b32 a; shr.u32 a, $1, 6; and.b32 $0, a, 0x03030303;}")
    _P0_4 = gl.constexpr("and.b32 $0, $1, 0x0F0F0F0F;")
    _P1_4 = gl.constexpr("{.reg .b32 a; shr.u32 a, $1, 4; and.b32 $0, a, 0x0F0F0F0F;}")
    # INT4 plane 1 where it stays in the high nibble (``_plane``'s HI): the byte (q ^ 8) << 4 read
    # as int8 is 16 (q - 8) exactly (flipping a 4-bit code's top bit makes it two's complement q -
    # 8), so one LOP3 a word and no shift; ``_plane_scale`` puts the 16 and the 8 back per row
    _P1_4_HI = gl.constexpr("lop3.b32 $0, $1, 0x80808080, 0xF0F0F0F0, 0x28;")

    @gluon.jit
    def _asm_plane(q, ASM: gl.constexpr):
        return gl.inline_asm_elementwise(ASM, "=r,r", [q], dtype=gl.int8, is_pure=True, pack=4)

    @gluon.jit
    def _plane(q, J: gl.constexpr, BITS: gl.constexpr, HI: gl.constexpr = False):
        """Plane J's codes of the packed bytes ``q`` (uint8, 4 a word) as int8, one op a word (INT4
        plane 1 with HI: ``16 (q - 8)``, see ``_P1_4_HI``)."""
        if BITS == 2:
            if J == 0:
                r = _asm_plane(q, _P0_2)
            elif J == 1:
                r = _asm_plane(q, _P1_2)
            elif J == 2:
                r = _asm_plane(q, _P2_2)
            else:
                r = _asm_plane(q, _P3_2)
        else:
            if J == 0:
                r = _asm_plane(q, _P0_4)
            elif HI:
                r = _asm_plane(q, _P1_4_HI)
            else:
                r = _asm_plane(q, _P1_4)
        return r

    @gluon.jit
    def _issue_stage(w_desc, sz_desc, x_desc, xs_desc, w_bufs, sz_bufs, x_bufs, xs_bufs, bars, i, row0,
                     STAGES: gl.constexpr, P: gl.constexpr, NB: gl.constexpr, CH: gl.constexpr, pred,
                     TABLE: gl.constexpr = False, XW: gl.constexpr = False, NOX: gl.constexpr = False, K0=0,
                     z_desc=None, z_bufs=None, PART: gl.constexpr = 0):
        """TMA of stage K0 + i (CH 64-byte chunks) into ring slot i % STAGES: codes [R, 64 CH]; per
        chunk the fp16 scales [P, R] and zero bytes [128 / R, R] (``z_desc`` / ``z_bufs``,
        ``_zero_box``; TABLE: the group codes [2, R] instead), the x tiles of the P planes [2 NB,
        32] each -- XW: the two halves' side-by-side tiles [NB, 32 P] (``x_int8`` ``wide``) -- and
        (not with TABLE, which needs none) the x sums [4, NB]. NOX: no x tiles or sums (they are
        resident, ``_issue_resident_x``). PART: 0 the whole stage; 1 the slot's barrier armed for
        the whole stage but only the weight side issued (codes, scales, zeros / group codes); 2 only
        the x side, on the barrier PART 1 armed (``_ws_producer``'s EARLY)."""
        slot = i % STAGES
        bar = bars.index(slot)
        XB: gl.constexpr = x_desc.block_type.nbytes
        XN: gl.constexpr = 0 if NOX else 2 if XW else P  # x boxes a chunk
        XSB: gl.constexpr = 0 if (TABLE or NOX) else xs_desc.block_type.nbytes
        ZB: gl.constexpr = 0 if TABLE else z_desc.block_type.nbytes
        nbytes: gl.constexpr = w_desc.block_type.nbytes + CH * (sz_desc.block_type.nbytes + ZB + XN * XB + XSB)
        if PART != 2:
            mbarrier.expect(bar, nbytes, pred=pred)
            tma.async_copy_global_to_shared(w_desc, [row0, (K0 + i) * (64 * CH)], bar, w_bufs.index(slot), pred)
        for ch in gl.static_range(CH):
            c = (K0 + i) * CH + ch  # global 64-byte chunk
            if PART != 2:
                if TABLE:  # stage-major group codes (``wgmma_table``): rows 2 c, 2 c + 1 of the block's tokens
                    tma.async_copy_global_to_shared(sz_desc, [2 * c, row0], bar, sz_bufs.index(slot * CH + ch), pred)
                else:  # the P planes' scales, then the byte of their zeros
                    tma.async_copy_global_to_shared(sz_desc, [P * c, row0], bar, sz_bufs.index(slot * CH + ch), pred)
                    tma.async_copy_global_to_shared(z_desc, [c, row0], bar, z_bufs.index(slot * CH + ch), pred)
            if not NOX and PART != 1:
                _issue_x_chunk(x_desc, xs_desc, x_bufs, xs_bufs, bar, c, slot * CH + ch, P, NB, TABLE, XW, pred)

    @gluon.jit
    def _issue_x_chunk(x_desc, xs_desc, x_bufs, xs_bufs, bar, c, u, P: gl.constexpr, NB: gl.constexpr,
                       TABLE: gl.constexpr, XW: gl.constexpr, pred):
        """TMA of 64-byte chunk c's x into x buffer u: the two side-by-side tiles (XW) or the P
        per-plane tiles, and (not with TABLE) its x sums. A side-by-side box of fewer than NB rows
        (``X_ROWS_BOX``) lands in the tiles' first rows (TMA swizzles by shared-memory address); the
        rest of the buffer is left as it is -- it feeds only the wgmma columns m >= M, which the
        epilogue never stores."""
        for j in gl.static_range(2 if XW else P):
            if XW:
                tma.async_copy_global_to_shared(x_desc, [(c * 2 + j) * NB, 0], bar, x_bufs.index(u * 2 + j), pred)
            else:
                tma.async_copy_global_to_shared(x_desc, [(c * P + j) * 2 * NB, 0], bar, x_bufs.index(u * P + j), pred)
        if not TABLE:
            tma.async_copy_global_to_shared(xs_desc, [c * 4, 0], bar, xs_bufs.index(u), pred)

    @gluon.jit
    def _issue_resident_x(x_desc, xs_desc, x_bufs, xs_bufs, bar, NC: gl.constexpr, P: gl.constexpr,
                          NB: gl.constexpr, TABLE: gl.constexpr):
        """TMA of all NC chunks' side-by-side x tiles (and, per group, x sums) into the resident
        buffers ``x_bufs`` [2 NC, NB, 32 P] / ``xs_bufs`` [NC, 4, NB], on one barrier."""
        XSB: gl.constexpr = 0 if TABLE else xs_desc.block_type.nbytes
        mbarrier.expect(bar, NC * (2 * x_desc.block_type.nbytes + XSB))
        for c in gl.static_range(NC):
            _issue_x_chunk(x_desc, xs_desc, x_bufs, xs_bufs, bar, c, c, P, NB, TABLE, True, True)

    @gluon.jit
    def _x_tile(xt_bufs, u, J: gl.constexpr, h: gl.constexpr, P: gl.constexpr, XW: gl.constexpr):
        """The B operand [32, NB] of (chunk buffer u, plane / register J, half h): the 32-byte
        column slice J of the side-by-side tile (XW) or the per-plane tile."""
        if XW:
            b = xt_bufs.index(2 * u + h).slice(32 * J, 32, dim=1)
        else:
            b = xt_bufs.index(2 * (u * P + J) + h)
        return b.permute((1, 0))

    @gluon.jit
    def _issue_plane(q0, q1, xt_bufs, slot, J: gl.constexpr, start, a_l: gl.constexpr, P: gl.constexpr,
                     BITS: gl.constexpr, XW: gl.constexpr = False, FROM_START: gl.constexpr = False,
                     HI: gl.constexpr = False):
        """Plane J of the stage in ``slot``: decode both 32-byte halves, start their two wgmmas
        (K = 64) from zero -- FROM_START: from the int32 tile ``start`` (``_plane_start``);
        returns the in-flight token."""
        a0 = gl.convert_layout(_plane(q0, J, BITS, HI), a_l, assert_trivial=True)
        a1 = gl.convert_layout(_plane(q1, J, BITS, HI), a_l, assert_trivial=True)
        d = warpgroup_mma(a0, _x_tile(xt_bufs, slot, J, 0, P, XW), start, use_acc=FROM_START, is_async=True)
        return warpgroup_mma(a1, _x_tile(xt_bufs, slot, J, 1, P, XW), d, is_async=True)

    @gluon.jit
    def _start_tile(nz, xs_rows, i, izero, col_l: gl.constexpr, ST: gl.constexpr):
        """The tile a plane's wgmmas start from: ``_plane_start`` of x-sum row ``i`` (ST), else the
        zeros (unread: the wgmma starts from zero)."""
        if ST:
            t = _plane_start(nz, xs_rows.index(i).load(col_l))
        else:
            t = izero
        return t

    @gluon.jit
    def _plane_start(nz, xs):
        """The int32 tile a plane's wgmmas start from under MAGIC 2: ``0x4B400000 - zero * xsum``
        per element (one IMAD with an immediate). The wgmma sum lands on it, so the result is the
        fp32 bit pattern of ``1.5 * 2^23 + (d - zero * xsum)`` -- the zero point removed and the
        int32 -> fp32 conversion's offset added by the instruction that had to set the tile anyway
        (exact while |d - zero * xsum| < 2^22: 2 x 64 codes < 16 times |x| <= 127)."""
        return gl.expand_dims(nz, 1) * gl.expand_dims(xs, 0) + _MAGIC_I

    @gluon.jit
    def _retire_plane(acc, d, sc, nz, xs_rows, i, col_l: gl.constexpr, MAGIC: gl.constexpr):
        """acc += scale * (d - zero * xsum) for one finished plane (``sc`` fp32 / ``nz`` int32 minus
        the zero, per row: ``_plane_scales``; xsum: row ``i`` of ``xs_rows``, read here, after the
        wgmmas, so it is not live across them): the zero point removed exactly in int32; MAGIC 1: the
        int32 -> fp32 conversion as ``(d + 0x4B400000 as fp32) - 1.5 * 2^23`` (exact for |d| < 2^22:
        64 codes < 16 times |x| <= 127) instead of I2F; MAGIC 2: ``d`` started from
        ``_plane_start`` (zero and offset already in it; no x sum read): one FADD and the
        FFMA. I2F runs at a fraction of the FP32 pipes' rate (16 a clock an SM), and at NB = 16 this
        pass converts ~1.2 M values an SM (124160 x 5120 INT4)."""
        if MAGIC == 2:
            f = d.to(gl.float32, bitcast=True) - _MAGIC_F
        else:
            xs = xs_rows.index(i).load(col_l)
            d = gl.expand_dims(nz, 1) * gl.expand_dims(xs, 0) + d  # one IMAD an element
            if MAGIC:
                f = (d + _MAGIC_I).to(gl.float32, bitcast=True) - _MAGIC_F
            else:
                f = d.to(gl.float32)
        return acc + f * gl.expand_dims(sc, 1)

    @gluon.jit
    def _rows(buf, ROW0: gl.constexpr, R: gl.constexpr):
        """``buf`` (a shared-memory buffer whose dim 0 runs along tokens) itself, or with ROW0 >= 0
        its R rows from ROW0 -- a consumer partition's half of a spanning program's rows
        (``_coarse_ws_kernel`` HALVES = 2)."""
        if ROW0 >= 0:
            buf = buf.slice(ROW0, R, dim=0)
        return buf

    @gluon.jit
    def _plane_scale(scale_rows, zb, u, J: gl.constexpr, P: gl.constexpr, BITS: gl.constexpr,
                     row_l: gl.constexpr, HI: gl.constexpr = False, NEGXS: gl.constexpr = False,
                     ROW0: gl.constexpr = -1):
        """(fp32 scale, int32 minus the zero) per token row of plane J of chunk buffer ``u``:
        ``scale_rows`` row P u + J, the zero from bits BITS J.. of the chunk's zero bytes ``zb``.
        INT4 plane 1 with HI (its codes decoded as ``16 (q - 8)``): scale / 16 and ``16 (8 - z)``,
        so that ``scale / 16 (d + 16 (8 - z) xsum)`` is the same fp32 product as before -- the
        integers are 16 times theirs and exact (|.| < 2^21), the scale exactly a 16th. NEGXS: the x
        sums are stored negated (``NEG_XSUM``), so the multiplier of the x sums is the zero itself
        (no negation a row and plane; HI: ``16 z - 128``)."""
        sc = _rows(scale_rows.index(P * u + J), ROW0, zb.shape[0]).load(row_l).to(gl.float32)
        z = (zb >> (BITS * J)) & ((1 << BITS) - 1)
        if HI and BITS == 4 and J == 1:
            if NEGXS:
                return sc * 0.0625, 16 * z - 128
            return sc * 0.0625, 128 - 16 * z
        if NEGXS:
            return sc, z
        return sc, -z

    @gluon.jit
    def _plane_scales(scale_rows, z_rows, u, P: gl.constexpr, BITS: gl.constexpr, row_l: gl.constexpr,
                      HI: gl.constexpr = False, NEGXS: gl.constexpr = False, ROW0: gl.constexpr = -1,
                      R: gl.constexpr = 0):
        """The 4 planes' (scale, minus zero) of chunk buffer ``u`` (:func:`_plane_scale`); planes
        j >= P repeat plane 0's (never read). All loaded before the chunk's first wgmma."""
        ZR: gl.constexpr = z_rows.shape[0] * P // scale_rows.shape[0]  # rows of a chunk's zero box
        zb = _rows(z_rows.index(ZR * u), ROW0, R).load(row_l).to(gl.int32)
        s0, z0 = _plane_scale(scale_rows, zb, u, 0, P, BITS, row_l, False, NEGXS, ROW0)
        s1, z1 = _plane_scale(scale_rows, zb, u, 1, P, BITS, row_l, HI, NEGXS, ROW0)
        if P == 4:
            s2, z2 = _plane_scale(scale_rows, zb, u, 2, P, BITS, row_l, False, NEGXS, ROW0)
            s3, z3 = _plane_scale(scale_rows, zb, u, 3, P, BITS, row_l, False, NEGXS, ROW0)
        else:
            s2 = s0
            z2 = z0
            s3 = s0
            z3 = z0
        return (s0, s1, s2, s3), (z0, z1, z2, z3)

    @gluon.jit
    def _stage_sum(acc, w_bufs, scale_rows, xt_bufs, xs_rows, slot, xslot, NB: gl.constexpr, W: gl.constexpr,
                   P: gl.constexpr, BITS: gl.constexpr, CH: gl.constexpr, PIPE: gl.constexpr, MAGIC: gl.constexpr,
                   XW: gl.constexpr = False, z_rows=None, HI: gl.constexpr = False, NEGXS: gl.constexpr = False,
                   ROW0: gl.constexpr = -1):
        """acc += the CH chunks x P planes of the stage in ``slot``, its scales in ``scale_rows`` (the
        [slots CH P, R] fp16 rows of the scale buffers) and zero bytes in ``z_rows`` ([slots CH, R]),
        its x tiles and sums in x buffer ``xslot`` (the
        ring slot, or the stage itself where x is resident). PIPE: plane
        j + 1's wgmmas are started before plane j is retired (its integer / fp32 epilogue overlaps
        them). ROW0 >= 0: the tokens are rows ROW0 .. ROW0 + 16 W - 1 of the slots (``_rows``)."""
        R: gl.constexpr = 16 * W
        mma: gl.constexpr = acc_layout(NB, W)
        a_l: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=4)
        row_l: gl.constexpr = gl.SliceLayout(1, mma)
        col_l: gl.constexpr = gl.SliceLayout(0, mma)
        wb = _rows(w_bufs.index(slot), ROW0, R)
        izero = gl.zeros([R, NB], gl.int32, mma)
        ST: gl.constexpr = MAGIC == 2  # the wgmmas start from _plane_start's tile
        for ch in gl.static_range(CH):
            u = slot * CH + ch  # the chunk's index in the per-chunk ring buffers
            ux = xslot * CH + ch  # ... in the x buffers
            q0 = wb.slice(64 * ch, 32, dim=1).load(_codes_layout(W))
            q1 = wb.slice(64 * ch + 32, 32, dim=1).load(_codes_layout(W))
            scs, nzs = _plane_scales(scale_rows, z_rows, u, P, BITS, row_l, HI, NEGXS, ROW0, R)
            # the x sums are read where they are used -- by _start_tile before the wgmmas (MAGIC
            # 2), else by _retire_plane after them: loaded early they stay live across the wgmmas,
            # and at NB = 64 that spilled (offline sm_90, two blocks a program: 88 bytes, not 16)
            if PIPE:
                d = _issue_plane(q0, q1, xt_bufs, ux, 0, _start_tile(nzs[0], xs_rows, 4 * ux, izero, col_l, ST),
                                 a_l, P, BITS, XW, ST, HI)
                for j in gl.static_range(1, P):
                    d_next = _issue_plane(q0, q1, xt_bufs, ux, j,
                                          _start_tile(nzs[j], xs_rows, 4 * ux + j, izero, col_l, ST), a_l, P, BITS,
                                          XW, ST, HI)
                    d = warpgroup_mma_wait(num_outstanding=2, deps=(d,))
                    acc = _retire_plane(acc, d, scs[j - 1], nzs[j - 1], xs_rows, 4 * ux + j - 1, col_l, MAGIC)
                    d = d_next
                d = warpgroup_mma_wait(num_outstanding=0, deps=(d,))
                acc = _retire_plane(acc, d, scs[P - 1], nzs[P - 1], xs_rows, 4 * ux + P - 1, col_l, MAGIC)
            else:
                for j in gl.static_range(P):
                    d = _issue_plane(q0, q1, xt_bufs, ux, j, _start_tile(nzs[j], xs_rows, 4 * ux + j, izero, col_l, ST),
                                     a_l, P, BITS, XW, ST, HI)
                    d = warpgroup_mma_wait(num_outstanding=0, deps=(d,))
                    acc = _retire_plane(acc, d, scs[j], nzs[j], xs_rows, 4 * ux + j, col_l, MAGIC)
        return acc

    # The byte-permute decode (INT2): one packed word (16 codes: 4 bytes x 4 planes) -> 4 registers
    # of int8 weights. Selector nibbles are the word's 2-bit fields: ``w & 0x33333333`` leaves in
    # nibble 2i the plane-0 code of byte i and in nibble 2i + 1 its plane-2 code; OR-ing 0x4 into
    # the odd nibbles (the same lop3) points those at the second table (bytes 4..7 of prmt's pair).
    # prmt reads the low 16 bits of its selector (bytes 0, 1 of the word), so a shift by 16 gives
    # bytes 2, 3 and a shift by 2 first the planes 1 / 3. Outputs: $0 bytes 0, 1 x planes 0, 2 (tables $5, $9),
    # $1 bytes 2, 3 x planes 0, 2, $2 bytes 0, 1 x planes 1, 3 (tables $13, $17), $3 bytes 2, 3 x
    # planes 1, 3 -- the K order of ``x_int8.prmt_source``. 9 ops for 16 codes.
    _PRMT_ASM = gl.constexpr(
        "{.reg .b32 s, h; "
        "lop3.b32 s, $4, 0x33333333, 0x40404040, 0xEA; "
        "prmt.b32 $0, $5, $9, s; shr.u32 h, s, 16; prmt.b32 $1, $5, $9, h; "
        "shr.u32 s, $4, 2; lop3.b32 s, s, 0x33333333, 0x40404040, 0xEA; "
        "prmt.b32 $2, $13, $17, s; shr.u32 h, s, 16; prmt.b32 $3, $13, $17, h;}")
    # 4 outputs, the packed codes, then the tables of planes 0, 2, 1, 3 (4 registers each under pack = 4)
    _PRMT_CONSTRAINTS = gl.constexpr("=r,=r,=r,=r," + ",".join(["r"] * 17))

    # The byte tables of a word of two 16-bit group codes (``table_codes``: A | (128 - A z) << 8):
    # A * 0x03020100 + (128 - A z) * 0x01010101, its bytes flipped back from the +128 offset.
    # prmt 0x4440 takes byte 0 zero-extended, 0x1111 repeats byte 1 in all four. $0: the low code's
    # table, $1: the high code's.
    _TABLE_ASM = gl.constexpr(
        "{.reg .b32 a, b; "
        "prmt.b32 a, $2, 0, 0x4440; prmt.b32 b, $2, 0, 0x1111; mad.lo.u32 a, a, 0x03020100, b; "
        "xor.b32 $0, a, 0x80808080; "
        "prmt.b32 a, $2, 0, 0x4442; prmt.b32 b, $2, 0, 0x3333; mad.lo.u32 a, a, 0x03020100, b; "
        "xor.b32 $1, a, 0x80808080;}")

    @gluon.jit
    def _tables(word):
        """The two byte tables (int32, like ``word``) of a word of two group codes."""
        return gl.inline_asm_elementwise(_TABLE_ASM, "=r,=r,r", [word], dtype=(gl.int32, gl.int32), is_pure=True,
                                         pack=1)

    @gluon.jit
    def _chunk_tables(code_rows, u, r_l: gl.constexpr, ROW0: gl.constexpr = -1, R: gl.constexpr = 0):
        """The byte tables of planes 0..3 (int32 [R, 1] each, rows in ``r_l``) of chunk buffer
        ``u``'s group codes (``code_rows`` rows 2 u, 2 u + 1; ROW0: see ``_rows``)."""
        t0, t1 = _tables(_rows(code_rows.index(2 * u), ROW0, R).load(r_l))
        t2, t3 = _tables(_rows(code_rows.index(2 * u + 1), ROW0, R).load(r_l))
        return gl.expand_dims(t0, 1), gl.expand_dims(t1, 1), gl.expand_dims(t2, 1), gl.expand_dims(t3, 1)

    @gluon.jit
    def _prmt_word(q, t0, t2, t1, t3):
        """The 4 int8 weight tensors (each like ``q``, uint8 [R, 32]) of the packed bytes ``q``; ``t*``
        int32 [R, 1]: the row's byte tables of planes 0..3 (:func:`wgmma_table`)."""
        return gl.inline_asm_elementwise(_PRMT_ASM, _PRMT_CONSTRAINTS, [q, t0, t2, t1, t3],
                                         dtype=(gl.int8, gl.int8, gl.int8, gl.int8), is_pure=True, pack=4)

    @gluon.jit
    def _stage_sum_table(acc, w_bufs, code_rows, xt_bufs, slot, xslot, NB: gl.constexpr, W: gl.constexpr,
                         P: gl.constexpr, CH: gl.constexpr, XW: gl.constexpr = False, ROW0: gl.constexpr = -1):
        """acc (int32) += the CH chunks of the stage in ``slot``, whole-row variant: per chunk the
        rows' byte tables built from their group codes (``_chunk_tables``; ``code_rows``: the
        codes buffer [slots CH, 2, R] as rows of R), both 32-byte halves decoded (``_prmt_word``: 4
        registers of weights each) before the first of its 8 wgmmas is issued -- ptxas serializes
        wgmmas whose register inputs are defined after the first one starts (C7513) -- then one
        wgmma chain; all retired on return (the caller refills the slot next). The x tiles are
        those of x buffer ``xslot`` (see ``_stage_sum``). XW: ``xt_bufs`` holds the side-by-side x
        tiles [2 buffers CH, NB, 32 P] and the B operand of (register j, half h) is the 32-byte
        column slice j of tile h. ROW0 >= 0: the tokens are rows ROW0 .. ROW0 + 16 W - 1 of the
        slots (``_rows``)."""
        mma: gl.constexpr = acc_layout(NB, W)
        a_l: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=4)
        c_l: gl.constexpr = _codes_layout(W)
        r_l: gl.constexpr = gl.SliceLayout(1, c_l)
        wb = _rows(w_bufs.index(slot), ROW0, 16 * W)
        for ch in gl.static_range(CH):
            t0, t1, t2, t3 = _chunk_tables(code_rows, slot * CH + ch, r_l, ROW0, 16 * W)
            v0 = _prmt_word(wb.slice(64 * ch, 32, dim=1).load(c_l), t0, t2, t1, t3)
            v1 = _prmt_word(wb.slice(64 * ch + 32, 32, dim=1).load(c_l), t0, t2, t1, t3)
            for h in gl.static_range(2):
                for j in gl.static_range(4):
                    a = gl.convert_layout((v0 if h == 0 else v1)[j], a_l, assert_trivial=True)
                    acc = warpgroup_mma(a, _x_tile(xt_bufs, xslot * CH + ch, j, h, P, XW), acc, is_async=True)
        return warpgroup_mma_wait(num_outstanding=0, deps=(acc,))

    @gluon.jit
    def _alloc_operands(w_desc, sz_desc, x_desc, xs_desc, STAGES: gl.constexpr, CH: gl.constexpr, R: gl.constexpr,
                        NB: gl.constexpr, P: gl.constexpr, TABLE: gl.constexpr, XW: gl.constexpr, XC: gl.constexpr,
                        TABLE_NO_XS: gl.constexpr, z_desc):
        """The ring's shared-memory buffers and their views: codes [STAGES, R, 64 CH]; the words --
        TABLE: group codes int32 [STAGES CH, 2, R], else the fp16 scales [STAGES CH, P, R]
        (``code_rows``: either as rows of R) and the zero bytes [STAGES CH, ZR, R] (``z_bufs``, rows
        ``z_rows``; ZR = 128 / R rows of the zeros' box, the stage's and at R = 64 the next one's,
        unread, so every slot stays 128-byte aligned as TMA needs; TABLE: none, the group codes'
        buffers stand in) -- the x tiles of XC chunks (XW: side by side [2 XC, NB, 32 P]; else per plane
        [STAGES CH P, 2 NB, 32], ``xt_bufs`` one B tile per half) and the x sums [XC, 4, NB]
        (``xs_rows``: rows of NB; TABLE_NO_XS: a [1, 4, NB] placeholder for TABLE, which reads none).
        Returns (w_bufs, sz_bufs, code_rows, x_bufs, xt_bufs, xs_bufs, xs_rows, z_bufs, z_rows)."""
        xt_sl: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=32, element_bitwidth=8, rank=2)
        rows_sl: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
        w_bufs = gl.allocate_shared_memory(gl.uint8, [STAGES, R, 64 * CH], w_desc.layout)
        if TABLE:
            sz_bufs = gl.allocate_shared_memory(gl.int32, [STAGES * CH, 2, R], sz_desc.layout)
            code_rows = sz_bufs._reinterpret(gl.int32, [STAGES * CH * 2, R], rows_sl)
            z_bufs = sz_bufs
            z_rows = code_rows
        else:
            sz_bufs = gl.allocate_shared_memory(gl.float16, [STAGES * CH, P, R], sz_desc.layout)
            code_rows = sz_bufs._reinterpret(gl.float16, [STAGES * CH * P, R], rows_sl)
            ZR: gl.constexpr = z_desc.block_type.shape[0]  # 128 // R rows: every slot 128-byte aligned for TMA
            z_bufs = gl.allocate_shared_memory(gl.uint8, [STAGES * CH, ZR, R], z_desc.layout)
            z_rows = z_bufs._reinterpret(gl.uint8, [STAGES * CH * ZR, R], rows_sl)
        if TABLE and TABLE_NO_XS:
            xs_bufs = gl.allocate_shared_memory(gl.int32, [1, 4, NB], xs_desc.layout)  # unused
            xs_rows = xs_bufs
        else:
            xs_bufs = gl.allocate_shared_memory(gl.int32, [XC, 4, NB], xs_desc.layout)
            xs_rows = xs_bufs._reinterpret(gl.int32, [XC * 4, NB], rows_sl)
        if XW:  # the side-by-side tiles: their TMA box is the wgmmas' B tile, 32 P-byte rows
            x_bufs = gl.allocate_shared_memory(gl.int8, [XC * 2, NB, 32 * P], x_desc.layout)
            xt_bufs = x_bufs
        else:
            x_bufs = gl.allocate_shared_memory(gl.int8, [STAGES * CH * P, 2 * NB, 32], x_desc.layout)
            xt_bufs = x_bufs._reinterpret(gl.int8, [STAGES * CH * P * 2, NB, 32], xt_sl)
        return w_bufs, sz_bufs, code_rows, x_bufs, xt_bufs, xs_bufs, xs_rows, z_bufs, z_rows

    @gluon.jit(do_not_specialize=["M", "N", "NBLK", "NS"])
    def _coarse_wgmma_kernel(w_desc, sz_desc, z_desc, x_desc, xs_desc, sx_ptr, r_ptr, ck_ptr, ci_ptr, lg_ptr, M, N,
                             NBLK, NS, NB: gl.constexpr, P: gl.constexpr, BITS: gl.constexpr, STAGES: gl.constexpr,
                             KCAND: gl.constexpr, WRITE_LOGITS: gl.constexpr, W: gl.constexpr,
                             PIPE: gl.constexpr = False, MAGIC: gl.constexpr = False, CH: gl.constexpr = 1,
                             TABLE: gl.constexpr = False, XW: gl.constexpr = False, SUB: gl.constexpr = 1,
                             EMIT: gl.constexpr = 0, HI: gl.constexpr = False, NEGXS: gl.constexpr = False):
        """Program b: tokens R b .. R b + R - 1 (R = 16 W) against the NB rows of x; writes the
        KCAND candidates of every row m < M of each of its SUB candidate blocks (R / SUB tokens;
        ``ck`` fp32 / ``ci`` int64 [M, NBLK KCAND], NBLK candidate blocks)
        and, if WRITE_LOGITS, its coarse logits into ``lg`` fp32 [M, N]. TABLE: the whole-row
        variant (``sz_desc`` holds :func:`wgmma_table`'s words, ``r_ptr`` its fp32 [N] units; x tiles
        in ``x_int8.prmt_source`` order)."""
        R: gl.constexpr = 16 * W
        mma: gl.constexpr = acc_layout(NB, W)
        col_l: gl.constexpr = gl.SliceLayout(0, mma)

        pid = gl.program_id(0)
        row0 = pid * R
        w_bufs, sz_bufs, code_rows, x_bufs, xt_bufs, xs_bufs, xs_rows, z_bufs, z_rows = _alloc_operands(
            w_desc, sz_desc, x_desc, xs_desc, STAGES, CH, R, NB, P, TABLE, XW, STAGES * CH, False, z_desc)
        bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(STAGES):
            mbarrier.init(bars.index(i), count=1)
        fence_async_shared()

        for i in gl.static_range(STAGES - 1):
            _issue_stage(w_desc, sz_desc, x_desc, xs_desc, w_bufs, sz_bufs, x_bufs, xs_bufs, bars, i, row0, STAGES,
                         P, NB, CH, i < NS, TABLE, XW, z_desc=z_desc, z_bufs=z_bufs)
        acc = gl.zeros([R, NB], gl.int32 if TABLE else gl.float32, mma)
        for i in range(0, NS):
            # slot (i - 1) % STAGES was read by stage i - 1: once every warp is past it, refill it
            gl.thread_barrier()
            _issue_stage(w_desc, sz_desc, x_desc, xs_desc, w_bufs, sz_bufs, x_bufs, xs_bufs, bars, i + STAGES - 1,
                         row0, STAGES, P, NB, CH, i + STAGES - 1 < NS, TABLE, XW, z_desc=z_desc, z_bufs=z_bufs)
            slot = i % STAGES
            mbarrier.wait(bars.index(slot), (i // STAGES) & 1)
            if TABLE:
                acc = _stage_sum_table(acc, w_bufs, code_rows, xt_bufs, slot, slot, NB, W, P, CH, XW)
            else:
                acc = _stage_sum(acc, w_bufs, code_rows, xt_bufs, xs_rows, slot, slot, NB, W, P, BITS, CH, PIPE, MAGIC,
                                 XW, z_rows, HI, NEGXS)
        for i in gl.static_range(STAGES):
            mbarrier.invalidate(bars.index(i))

        sx = gl.load(sx_ptr + gl.arange(0, NB, layout=col_l))
        out = block_logits(acc, sx, r_ptr, row0, N, R, mma, TABLE)
        emit_candidates(out, row0, pid, ck_ptr, ci_ptr, lg_ptr, M, N, NBLK, NB, W, KCAND, WRITE_LOGITS, SUB, EMIT)

    # ---------------------------------------------------- warp-specialized (whole-row and per group)
    @gluon.jit
    def _split_range(pid, FULL, NS, PARTS: gl.constexpr):
        """(row block, first stage, end stage) of program ``pid`` when the programs from FULL on run
        the blocks from FULL on in PARTS shares of their NS stages each (share q: stages
        ``q NS / PARTS .. (q + 1) NS / PARTS``); programs below FULL run block ``pid`` whole."""
        tail = (pid >= FULL).to(gl.int32)
        j = (pid - FULL) * tail
        q = j % PARTS
        blk = pid + tail * (FULL + j // PARTS - pid)
        s0 = tail * (q * NS // PARTS)
        s1 = NS + tail * ((q + 1) * NS // PARTS - NS)
        return blk, s0, s1

    @gluon.jit
    def _ws_consumer(w_bufs, code_rows, xt_bufs, xs_rows, ready, empty, sx_ptr, r_ptr, ck_ptr, ci_ptr, lg_ptr, M,
                     N, NBLK, NS, GRID, NB: gl.constexpr, P: gl.constexpr, BITS: gl.constexpr, STAGES: gl.constexpr,
                     KCAND: gl.constexpr, WRITE_LOGITS: gl.constexpr, W: gl.constexpr, TABLE: gl.constexpr,
                     XW: gl.constexpr = False, CH: gl.constexpr = 1, PDL: gl.constexpr = False, xbar=None,
                     XRES: gl.constexpr = 0, SUB: gl.constexpr = 1, EMIT: gl.constexpr = 0,
                     LATE: gl.constexpr = False, part_ptr=None, tick_ptr=None, FULL=0, PARTS: gl.constexpr = 1,
                     GPIPE: gl.constexpr = False, z_rows=None, GMAGIC: gl.constexpr = 0,
                     HI: gl.constexpr = False, NEGXS: gl.constexpr = False, HALF: gl.constexpr = 0,
                     HALVES: gl.constexpr = 1):
        """Consumer partition (W warps), for each row block ``pid, pid + GRID, ...``: per stage (CH
        64-byte chunks), wait for its TMA, run the stage (TABLE: the whole-row decode and wgmma
        chain into an int32 sum; else the per-group planes, ``_stage_sum``, into fp32), hand the
        slot back (partition barrier, one arrive); then the block's epilogue. PDL: nothing global
        is read before ``griddepcontrol.wait`` (``sx`` is the x preparation's output); then the next
        PDL launch (the selection) may place its CTAs -- LATE: only once the program's last block
        is done. The stage loop is unrolled by the ring, so
        every slot's shared-memory addresses (the wgmma descriptors) are compile-time constants
        instead of arithmetic on ``i % STAGES``; a block starts on slot 0, so GRID < NBLK needs
        ``NS % STAGES == 0`` (the launcher's rule). XRES (> 0): x is resident (all XRES chunks'
        tiles loaded once, ``xbar``), stage i's x buffer is i itself. A row block is SUB candidate
        blocks (NBLK of those in all).

        HALVES = 2 (``SPLIT_SPAN``, with SUB = 2): this partition is one of two consumer partitions
        of a spanning program, the rows of candidate block HALF of each row block (rows HALF R ..
        of the slots' codes, scales or group codes and zero bytes); each releases a slot on its own
        (``empty`` counts both) and emits its block with the one-block epilogue.

        PARTS > 1 (one block a program, ``_split_range``): programs from FULL on each run a 1 / PARTS
        share of a block's stages; each stores its partial sum into ``part_ptr`` and takes a ticket
        of the block (``tick_ptr``), and the last to arrive adds the PARTS partial sums (in part
        order, so the result does not depend on who arrives last), resets the ticket and emits the
        block's candidates.

        Not done, and why: releasing a slot one stage late (its wgmmas running on while the next
        stage is decoded) is what ptxas forbids for register A operands -- it then serializes
        every wgmma (C7513); 2 or 4 independent accumulators measured within 1% (session 19)."""
        R: gl.constexpr = 16 * W
        mma: gl.constexpr = acc_layout(NB, W)
        ROW0: gl.constexpr = HALF * R if HALVES == 2 else -1  # this partition's rows of the slots
        if PDL:
            gdc_wait()
            if not LATE:
                gdc_launch_dependents()
        sx = gl.load(sx_ptr + gl.arange(0, NB, layout=gl.SliceLayout(0, mma)))
        if XRES:
            mbarrier.wait(xbar.index(0), 0)
        if PARTS > 1:  # one block a program; from FULL on a share of its stages (_split_range)
            pid = gl.program_id(0)
            blk, s0, s1 = _split_range(pid, FULL, NS, PARTS)
            acc = gl.zeros([R, NB], gl.int32 if TABLE else gl.float32, mma)
            for i0 in range(0, s1 - s0, STAGES):
                phase = (i0 // STAGES) & 1
                for slot in gl.static_range(STAGES):
                    if i0 + slot < s1 - s0:
                        mbarrier.wait(ready.index(slot), phase)
                        if TABLE:
                            acc = _stage_sum_table(acc, w_bufs, code_rows, xt_bufs, slot, slot, NB, W, P, CH, XW)
                        else:
                            acc = _stage_sum(acc, w_bufs, code_rows, xt_bufs, xs_rows, slot, slot, NB, W, P, BITS,
                                             CH, GPIPE, GMAGIC, XW, z_rows, HI, NEGXS)
                        gl.thread_barrier()
                        mbarrier.arrive(empty.index(slot))
            if pid >= FULL:
                j = pid - FULL
                base = j // PARTS
                rr = gl.arange(0, R, layout=gl.SliceLayout(1, mma))
                cc = gl.arange(0, NB, layout=gl.SliceLayout(0, mma))
                offs = gl.expand_dims(rr, 1) * NB + gl.expand_dims(cc, 0)
                gl.store(part_ptr + j.to(gl.int64) * (R * NB) + offs, acc)
                gl.thread_barrier()  # every consumer thread's partial is stored before the ticket
                if gl.atomic_add(tick_ptr + base, 1, sem="acq_rel") == PARTS - 1:
                    first = part_ptr + (base * PARTS).to(gl.int64) * (R * NB) + offs
                    tot = gl.load(first, cache_modifier=".cg")
                    for q in gl.static_range(1, PARTS):
                        tot += gl.load(first + q * (R * NB), cache_modifier=".cg")
                    gl.atomic_xchg(tick_ptr + base, 0, sem="relaxed")  # every part has arrived
                    out = block_logits(tot, sx, r_ptr, blk * R, N, R, mma, TABLE)
                    emit_candidates(out, blk * R, blk, ck_ptr, ci_ptr, lg_ptr, M, N, NBLK, NB, W, KCAND,
                                     WRITE_LOGITS, 1, EMIT)
            else:
                out = block_logits(acc, sx, r_ptr, blk * R, N, R, mma, TABLE)
                emit_candidates(out, blk * R, blk, ck_ptr, ci_ptr, lg_ptr, M, N, NBLK, NB, W, KCAND, WRITE_LOGITS,
                                 1, EMIT)
        else:
            lap0 = 0  # ring laps before this block
            for blk in range(gl.program_id(0), (NBLK + SUB - 1) // SUB, GRID):
                row0 = (blk * HALVES + HALF) * R
                acc = gl.zeros([R, NB], gl.int32 if TABLE else gl.float32, mma)
                for i0 in range(0, NS, STAGES):
                    phase = (lap0 + i0 // STAGES) & 1
                    for slot in gl.static_range(STAGES):
                        if i0 + slot < NS:
                            mbarrier.wait(ready.index(slot), phase)
                            if XRES:
                                xslot = i0 + slot
                            else:
                                xslot = slot
                            if TABLE:
                                acc = _stage_sum_table(acc, w_bufs, code_rows, xt_bufs, slot, xslot, NB, W, P, CH, XW,
                                                       ROW0)
                            else:
                                acc = _stage_sum(acc, w_bufs, code_rows, xt_bufs, xs_rows, slot, xslot, NB, W, P, BITS,
                                                 CH, GPIPE, GMAGIC, XW, z_rows, HI, NEGXS, ROW0)
                            gl.thread_barrier()  # every consumer warp has retired the slot's wgmmas
                            mbarrier.arrive(empty.index(slot))
                lap0 += NS // STAGES
                out = block_logits(acc, sx, r_ptr, row0, N, R, mma, TABLE)
                if HALVES == 1:
                    emit_candidates(out, row0, blk, ck_ptr, ci_ptr, lg_ptr, M, N, NBLK, NB, W, KCAND, WRITE_LOGITS,
                                     SUB, EMIT)
                else:  # one candidate block, none past the last (an odd NBLK's last program): no rows of x
                    cb = blk * HALVES + HALF
                    # at NB = 64 the float max-and-mask rounds (offline sm_90, INT2 / INT4: 14 / 16
                    # spill instructions a block, against 133 / 85 for sorted heads on int32 keys)
                    HEMIT: gl.constexpr = EMIT if NB <= 32 else EMIT & 4
                    emit_candidates(out, row0, cb, ck_ptr, ci_ptr, lg_ptr, M * (cb < NBLK).to(gl.int32), N, NBLK, NB,
                                     W, KCAND, WRITE_LOGITS, 1, HEMIT)
        if PDL and LATE:
            gdc_launch_dependents()

    @gluon.jit
    def _ws_producer(w_desc, sz_desc, x_desc, xs_desc, w_bufs, sz_bufs, x_bufs, xs_bufs, ready, empty, NBLK,
                     NS, GRID, STAGES: gl.constexpr, P: gl.constexpr, NB: gl.constexpr, R: gl.constexpr,
                     XW: gl.constexpr = False, CH: gl.constexpr = 1, PDL: gl.constexpr = False,
                     TABLE: gl.constexpr = True, xbar=None, XRES: gl.constexpr = 0, SUB: gl.constexpr = 1,
                     FULL=0, PARTS: gl.constexpr = 1, z_desc=None, z_bufs=None, EARLY: gl.constexpr = False):
        """Worker partition (1 warp): for each of the program's row blocks (R rows, SUB of the NBLK
        candidate blocks; PARTS > 1: its one block's share of stages, ``_split_range``), the TMA of stage i into
        slot i % STAGES once the consumers released it (free on the first lap: a wait on parity 1
        of a fresh mbarrier returns at once). It runs on into the next block while the consumers
        finish this one's epilogue. PDL: no x TMA before ``griddepcontrol.wait`` (x's tiles are the
        previous launch's output). XRES: first all of x, once (``_issue_resident_x``).

        EARLY (with PDL, not XRES): the weights do not depend on the launch before, so the first
        block's first STAGES stages have their codes and scales (or group codes) issued before the
        wait -- the ring fills while x is prepared -- and their x tiles after it, on the same
        barriers. The first wave of CTAs (placed while x is prepared) so brings 14 MB of INT2 codes
        (396 CTAs x 4 stages x 9 KB) or 9 MB of INT4 (264 x 4 x 8.6 KB) -- about the x preparation's
        2.7-3 us of HBM time at M = 1 -- before it could otherwise start."""
        if PARTS > 1:
            blk, s0, s1 = _split_range(gl.program_id(0), FULL, NS, PARTS)
        else:
            blk = gl.program_id(0)
            s0 = 0
            s1 = NS
        E: gl.constexpr = STAGES if (EARLY and PDL and not XRES) else 0  # stages issued around the wait
        for e in gl.static_range(E):
            _issue_stage(w_desc, sz_desc, x_desc, xs_desc, w_bufs, sz_bufs, x_bufs, xs_bufs, ready, e, blk * R,
                         STAGES, P, NB, CH, e < s1 - s0, TABLE, XW, False, s0, z_desc, z_bufs, 1)
        if PDL:
            gdc_wait()
        for e in gl.static_range(E):
            _issue_stage(w_desc, sz_desc, x_desc, xs_desc, w_bufs, sz_bufs, x_bufs, xs_bufs, ready, e, blk * R,
                         STAGES, P, NB, CH, e < s1 - s0, TABLE, XW, False, s0, z_desc, z_bufs, 2)
        if XRES:
            _issue_resident_x(x_desc, xs_desc, x_bufs, xs_bufs, xbar.index(0), XRES, P, NB, TABLE)
        if PARTS > 1:
            for i in range(E, s1 - s0):
                mbarrier.wait(empty.index(i % STAGES), ((i // STAGES) & 1) ^ 1)
                _issue_stage(w_desc, sz_desc, x_desc, xs_desc, w_bufs, sz_bufs, x_bufs, xs_bufs, ready, i, blk * R,
                             STAGES, P, NB, CH, True, TABLE, XW, False, s0, z_desc, z_bufs)
        else:
            c = 0  # stages issued so far (with NS % STAGES == 0 when a program has several blocks)
            for blk in range(gl.program_id(0), (NBLK + SUB - 1) // SUB, GRID):
                # the first block's first E stages went out around the wait (at most NS of them: a
                # program of several blocks has NS % STAGES == 0)
                i0 = 0
                if E:
                    i0 = gl.minimum(NS, E) * (c == 0).to(gl.int32)
                    c += i0
                for i in range(i0, NS):
                    mbarrier.wait(empty.index(i % STAGES), ((c // STAGES) & 1) ^ 1)
                    _issue_stage(w_desc, sz_desc, x_desc, xs_desc, w_bufs, sz_bufs, x_bufs, xs_bufs, ready, i,
                                 blk * R, STAGES, P, NB, CH, True, TABLE, XW, XRES > 0, 0, z_desc, z_bufs)
                    c += 1

    @gluon.jit(do_not_specialize=["M", "N", "NBLK", "NS", "GRID", "FULL"])
    def _coarse_ws_kernel(w_desc, sz_desc, z_desc, x_desc, xs_desc, sx_ptr, r_ptr, ck_ptr, ci_ptr, lg_ptr, M, N, NBLK,
                          NS, GRID, NB: gl.constexpr, P: gl.constexpr, STAGES: gl.constexpr, KCAND: gl.constexpr,
                          WRITE_LOGITS: gl.constexpr, W: gl.constexpr, PRODUCER_REGS: gl.constexpr,
                          XW: gl.constexpr = False, CH: gl.constexpr = 1, PDL: gl.constexpr = False,
                          TABLE: gl.constexpr = True, BITS: gl.constexpr = 2, XRES: gl.constexpr = 0,
                          SUB: gl.constexpr = 1, EMIT: gl.constexpr = 0, LATE: gl.constexpr = False,
                          part_ptr=None, tick_ptr=None, FULL=0, PARTS: gl.constexpr = 1,
                          GPIPE: gl.constexpr = False, GMAGIC: gl.constexpr = 0, HI: gl.constexpr = False,
                          EARLY: gl.constexpr = False, NEGXS: gl.constexpr = False, HALVES: gl.constexpr = 1,
                          CONSUMER_REGS: gl.constexpr = 0):
        """``_coarse_wgmma_kernel`` (same arguments plus GRID: the programs launched, each taking
        row blocks ``pid, pid + GRID, ...``; XW: x as side-by-side tiles; PDL: a programmatic
        dependent launch after the x preparation; TABLE: the whole-row variant, else per group
        with the x sums) with its TMA issued by a 1-warp producer partition (``ready`` / ``empty``
        mbarrier pair per slot): the consumer warps' stage loop carries no TMA issue and one
        partition barrier instead of a CTA barrier per TMA (Gluon's single-partition loop has one
        after each issue). XRES (> 0, with XW): x resident -- all XRES = NS CH chunks' x tiles (and
        sums) in shared memory, loaded once per program, so a persistent program's later row
        blocks and every stage read x without a TMA; the ring carries codes and words only.
        PARTS > 1 (one block a program, GRID = FULL + (blocks - FULL) PARTS): the blocks from FULL
        on split in PARTS shares of their stages, the partial sums met in ``part_ptr`` (int32 /
        fp32 [(blocks - FULL) PARTS, R, NB]) under the blocks' tickets ``tick_ptr`` (int32, zero,
        left zero) -- see ``_ws_consumer``. EARLY: the first weight stages issued before the PDL
        wait (``_ws_producer``). NEGXS: the x sums come negated (``NEG_XSUM``, ``_plane_scale``).

        HALVES = 2 (``SPLIT_SPAN``; SUB = 2, launched with W / 2 warps): two consumer partitions of
        W / 2 warps, one a candidate block, each on its half of the program's rows (the other at
        CONSUMER_REGS registers) -- out of step with each other, so one decodes while the other's
        wgmmas run, where the W warps of one partition meet at a barrier every stage."""
        R: gl.constexpr = 16 * W
        XC: gl.constexpr = XRES if XRES else STAGES * CH  # chunks the x buffers hold
        w_bufs, sz_bufs, code_rows, x_bufs, xt_bufs, xs_bufs, xs_rows, z_bufs, z_rows = _alloc_operands(
            w_desc, sz_desc, x_desc, xs_desc, STAGES, CH, R, NB, P, TABLE, XW, XC, True, z_desc)
        ready, empty, xbar = ring_barriers(STAGES, HALVES)  # xbar: the resident x's load
        # (the partitions' tuples are spelled out in each call: a tuple held in a variable loses its
        # constexprs)
        if HALVES == 1:
            gl.warp_specialize([
                (_ws_consumer, (w_bufs, code_rows, xt_bufs, xs_rows, ready, empty, sx_ptr, r_ptr, ck_ptr, ci_ptr,
                                lg_ptr, M, N, NBLK, NS, GRID, NB, P, BITS, STAGES, KCAND, WRITE_LOGITS, W, TABLE, XW,
                                CH, PDL, xbar, XRES, SUB, EMIT, LATE, part_ptr, tick_ptr, FULL, PARTS, GPIPE, z_rows,
                                GMAGIC, HI, NEGXS)),
                (_ws_producer, (w_desc, sz_desc, x_desc, xs_desc, w_bufs, sz_bufs, x_bufs, xs_bufs, ready, empty,
                                NBLK, NS, GRID, STAGES, P, NB, R, XW, CH, PDL, TABLE, xbar, XRES, SUB, FULL, PARTS,
                                z_desc, z_bufs, EARLY)),
            ], [1], [PRODUCER_REGS])
        else:
            gl.static_assert(HALVES == 2 and SUB == 2 and CONSUMER_REGS > 0,
                             "two consumer partitions serve a spanning program, the second at CONSUMER_REGS")
            WH: gl.constexpr = W // 2
            gl.warp_specialize([
                (_ws_consumer, (w_bufs, code_rows, xt_bufs, xs_rows, ready, empty, sx_ptr, r_ptr, ck_ptr, ci_ptr,
                                lg_ptr, M, N, NBLK, NS, GRID, NB, P, BITS, STAGES, KCAND, WRITE_LOGITS, WH, TABLE, XW,
                                CH, PDL, xbar, XRES, SUB, EMIT, LATE, part_ptr, tick_ptr, FULL, PARTS, GPIPE, z_rows,
                                GMAGIC, HI, NEGXS, 0, 2)),
                (_ws_consumer, (w_bufs, code_rows, xt_bufs, xs_rows, ready, empty, sx_ptr, r_ptr, ck_ptr, ci_ptr,
                                lg_ptr, M, N, NBLK, NS, GRID, NB, P, BITS, STAGES, KCAND, WRITE_LOGITS, WH, TABLE, XW,
                                CH, PDL, xbar, XRES, SUB, EMIT, LATE, part_ptr, tick_ptr, FULL, PARTS, GPIPE, z_rows,
                                GMAGIC, HI, NEGXS, 1, 2)),
                (_ws_producer, (w_desc, sz_desc, x_desc, xs_desc, w_bufs, sz_bufs, x_bufs, xs_bufs, ready, empty,
                                NBLK, NS, GRID, STAGES, P, NB, R, XW, CH, PDL, TABLE, xbar, XRES, SUB, FULL, PARTS,
                                z_desc, z_bufs, EARLY)),
            ], [WH, 1], [CONSUMER_REGS, PRODUCER_REGS])
        invalidate_ring_barriers(ready, empty, xbar, STAGES)


def wgmma_available(device: torch.device) -> bool:
    """Gluon importable and ``device`` a CUDA sm_90 GPU."""
    return (_GLUON_IMPORT_ERROR is None and device.type == "cuda"
            and torch.cuda.get_device_capability(device) == (9, 0))


#: plane j + 1's wgmmas in flight while plane j is retired (see ``_stage_sum``). Off: measured
#: within +-5% either way and it costs 48 registers at NB = 64 (H200 sweep, session 14 call b)
PIPE = False
#: int32 -> fp32 by the magic-number add instead of I2F (see ``_retire_plane``). Off: one more
#: instruction an element, 0-15% slower in the same sweep
MAGIC = False
#: the whole-row variant at NB <= this runs the warp-specialized kernel (``_coarse_ws_kernel``:
#: TMA from a 1-warp producer partition), above it the single-partition loop. H200, 124160 x 5120
#: INT2 g64, coarse pass alone (docs/measurements/2026-12-03_session18_{a,c}_tune_*): M = 8 82-84
#: vs 100 us, M = 16 93-95 vs 109, M = 32 117 vs 128; M = 64 186 (uncapped, one CTA an SM) - 213
#: (capped) vs 178
WS_TABLE_MAX_NB = 32
#: the per-group pass (INT4; INT2 outside ``TABLE_BITS``) at NB <= this runs the same
#: warp-specialized kernel (``TABLE=False``: fp32 accumulator, x sums in the ring), above it the
#: single-partition loop. H200, 124160 x 5120 INT4 g64, fast argmax in the same run (session 26
#: call b): M = 1 117.7 vs 131.7 us, M = 8 125.2 vs 133.8, M = 16 133.9 vs 147.7, M = 32 163.4 vs
#: 186.8 (NB = 64 spills at the 80-register cap two CTAs an SM need)
WS_GROUP_MAX_NB = 32
#: registers of that producer warp (Gluon pads its partition to a warpgroup: a CTA of 8 consumer
#: warps is 384 threads, two CTAs an SM at 64-85 registers). The consumers get the rest of the
#: launch cap's registers: at 56 (three CTAs an SM) (56 x 384 - 40 x 128) / 256 = 64, too few for
#: the INT2 NB = 16 wgmma chain (offline sm_90: C7512, serialized); 24 leaves them 72 (no C7512, no
#: spills at any shipped config). 24 is setmaxnreg's minimum. H200 fast argmax, same run (session
#: 28 call e, 24 vs 40): INT2 M = 16 78.7 vs 81.5 us, M = 32 98.4 vs 100.2; M = 1 / 8 / 64 and INT4
#: within noise (0.5%)
PRODUCER_REGS = 24
#: the warp-specialized kernel persistent: ``PERSIST_CTAS_PER_SM`` programs an SM (its residency:
#: 384-thread CTAs at 64-80 registers) each looping over row blocks, the producer running on into
#: the next block during the consumers' epilogue. Off: the coarse pass alone is within 1-2% either
#: way (session 25 call d: persistent 64.2 vs 66.4 us at M = 1; session 26 call a: 67.3 vs 66.9),
#: but fast argmax end to end -- the PDL selection after it -- is 4-5% slower persistent at
#: M = 16 / 32 (H200, 124160 x 5120 INT2, same run, session 26 call c: 90.3 vs 85.1 us, 106.2 vs
#: 102.4; equal at M = 1 / 8; INT4 within 2% either way)
#: (session 33 call e, three programs an SM, the whole-row pass: +2.7 / +2.4 us at M = 1 / 8, the
#: pass alone +10.7 / +9.4 -- the split tail is lost and the epilogue overlap does not repay it)
PERSIST_WS = False
PERSIST_CTAS_PER_SM = 2
#: a persistent warp-specialized program keeps all of x in shared memory (its tiles and sums loaded
#: once, ``_issue_resident_x``) instead of streaming them through the ring with every stage, where
#: the ring and x fit ``RESIDENT_SMEM`` (two CTAs an SM): NB = 8 up to K ~ 9.8k at 4 slots. Off:
#: measured no faster (session 26 call c, same run, fast argmax: INT2 M = 1 78.1 vs 76.6 us
#: streamed, INT4 116.2 vs 117.6; M = 8 / 16 within 1%) -- x is not what bounds the pass
X_RESIDENT = False
RESIDENT_SMEM = 112 * 1024
#: longest padded K of the whole-row variant: its int32 sums of |A (q - z) xq| <= 127^2 stay exact
TABLE_MAX_K = 131072
#: ring slots per M band (NB): the x tiles grow with NB, so fewer slots keep two CTAs an SM
_STAGES = {8: 4, 16: 4, 32: 4, 64: 3}
#: ring slots per NB where a program spans two blocks (one CTA an SM: a deeper ring fits)
_STAGES_SPAN = {8: 6, 16: 6, 32: 5, 64: 4}
#: the same with two 64-byte chunks a stage
_STAGES_2CH = {8: 3, 16: 3, 32: 2, 64: 2}
#: 64-byte chunks a stage of the warp-specialized whole-row kernel per NB (default 1). Two measured
#: no faster (session 25 call d: M = 1 67.6 vs 66.4 us, M = 16 72.0 vs 72.8 at the same register
#: cap; they need 80 registers, and 64 serializes the wgmmas, C7512)
WS_CHUNKS: dict = {}
#: the warp-specialized kernels' producer issues the first block's first ring of weight stages
#: (codes, scales and zeros / group codes) before its PDL wait and their x tiles after it
#: (``_ws_producer`` EARLY): the weights are not the x preparation's output, so the ring fills
#: while x is prepared (the chain's x preparation measured 2.7 / 3.0 us at INT2 / INT4 M = 1,
#: session 33 call b). Prepared, not yet timed on the H200: off
EARLY_RING = False
#: the warp-specialized kernels' x boxes (side by side, ``X_WIDE``) only as tall as the rows of x
#: there are, M rounded up to a power of two, instead of NB = 8 at M < 8 (``_issue_x_chunk``): at
#: M = 1 a stage brings 256 bytes of x instead of 2 KB (INT2) beside its 9 KB of weights. The other
#: rows of the x buffers keep whatever they held; they feed only wgmma columns m >= M, which are
#: never stored. Prepared, not yet timed on the H200: off
X_ROWS_BOX = False
#: the per-group kernels read the x sums stored negated by the x preparation (``x_int8_tiles``
#: ``neg_sums``), so the multiplier of a plane's x sums is its zero itself: a plane's start tile
#: ``zero * (-xsum) + offset`` needs no negation of the zero a row and plane (``_plane_scale``
#: NEGXS). Offline sm_90 (124160 x 5120 INT4, the shipped configurations): 4 IMAD.MOV fewer a
#: stage -- a 4-stage lap 376 -> 358 instructions at NB = 8, 487 -> 471 at 16, 695 -> 679 at 32,
#: 845 -> 826 at 64 (two blocks a program), registers and spills unchanged. The same sums. Prepared,
#: not yet timed on the H200 (NB = 16, where the pass is near issue-bound, is the case): off
NEG_XSUM = False
#: the warp-specialized whole-row kernel as a programmatic dependent launch after the x
#: preparation (whose early trigger lets its CTAs be placed and run their prologue meanwhile)
PDL = True
#: from this NB up the warp-specialized kernel lets the next PDL launch (the selection) place its
#: CTAs only when a program's last block is done (``_ws_consumer`` LATE), below it at the program's
#: start. H200, fast argmax, same run (session 29 call c, late at every NB vs the early trigger):
#: 124160 x 5120 INT4 M = 16 118.1 -> 115.6 us, M = 32 145.0 -> 143.9, INT2 M = 32 97.9 -> 97.1,
#: SmolLM2's 49152 x 576 INT2 M = 16 20.9 -> 19.4; M <= 8 within +-0.4 (INT4 M = 1 +0.4)
LATE_TRIGGER_MIN_NB = 16
#: 64-byte chunks per stage (1 or 2; a stage's fixed cost -- barrier, TMA issue, waits -- is
#: shared by its chunks); used when it divides the plane's chunks
CHUNKS = 1
#: ``maxnreg`` per NB (none: the compiler's choice). NB = 64 at 128 registers holds two 8-warp
#: CTAs an SM instead of one: INT2 M = 64 313 -> 254 us, INT4 356 -> 277 (124160 x 5120, block
#: 128, session 15 call a); at NB = 32 the cap was 2-7% slower
MAXNREG: dict = {64: 128}
#: ``maxnreg`` per NB of the whole-row variant: none (111 registers at NB = 64 already fit two
#: 8-warp CTAs an SM; the cap of ``MAXNREG`` spills there, offline sm_90 compile)
MAXNREG_TABLE: dict = {}
#: ``maxnreg`` per NB of the warp-specialized whole-row kernel (offline sm_90 compile: uncapped
#: it takes 168 registers, one CTA an SM; 64 spill nothing up to NB = 32 -- two CTAs of 384
#: threads an SM, ncu session 19 -- and 96 at NB = 64 spills 72 bytes for two CTAs an SM). With x
#: in side-by-side tiles 64 spills at NB = 16 and serializes the wgmmas at NB = 32 (C7512); 80
#: does neither and still holds two CTAs an SM: M = 32 95.1 -> 87.9 us, M = 16 73.8 -> 72.8, M = 1 /
#: 8 within 1% (session 25 call d). Two CTAs an SM; ``THREE_CTAS_*`` below overrides some NB
MAXNREG_WS: dict = {8: 64, 16: 80, 32: 80, 64: 96}
#: the same for the per-group warp-specialized kernel (two 384-thread CTAs an SM need <= 85)
MAXNREG_WS_GROUP: dict = {8: 80, 16: 80, 32: 80, 64: 80}
#: three CTAs an SM (3 x 384 x 56 <= 64K registers): the warp-specialized kernels' cap at the NB
#: of ``THREE_CTAS_NB_TABLE`` (whole-row) / ``THREE_CTAS_NB_GROUP`` (per group) on heads whose
#: plane has at least ``THREE_CTAS_MIN_STAGES`` 64-byte stages. Coarse pass alone, 124160 x 5120
#: (session 28 call b, ``tune_coarse_span.py --variants ring``): INT2 M = 1 65.7 -> 60.7 us,
#: M = 8 66.6 -> 61.4, M = 16 72.1 -> 70.2, NB = 32 slower (86.4 -> 100.3); INT4 NB = 16 110.1 ->
#: 108.4, NB = 8 97.8 -> 99.1. Fast argmax end to end (call c, same run): INT2 M = 1 75.2 -> 69.8
#: us, M = 8 76.8 -> 71.6, M = 16 83.3 -> 81.1. On SmolLM2's 49152 x 576 (3 stages) the coarse pass
#: is faster at three CTAs but fast argmax end to end slower at M = 8 / 16 (INT2 18.9 vs 17.0 us,
#: 23.0 vs 20.7; INT4 M = 16 23.6 vs 21.5; calls c / d) -- the PDL selection launch after it finds
#: no room to place its CTAs early -- so short heads keep two
THREE_CTAS_REGS = 56
THREE_CTAS_NB_TABLE: tuple = (8, 16)
THREE_CTAS_NB_GROUP: tuple = (16,)
THREE_CTAS_MIN_STAGES = 8


def _ws_regs(nb: int, table: bool, stages: int) -> int | None:
    """``maxnreg`` of a one-block warp-specialized launch at NB ``nb`` over ``stages`` 64-byte
    stages of the plane: three CTAs an SM where listed, else the two-CTA table."""
    if stages >= THREE_CTAS_MIN_STAGES and nb in (THREE_CTAS_NB_TABLE if table else THREE_CTAS_NB_GROUP):
        return THREE_CTAS_REGS
    return (MAXNREG_WS if table else MAXNREG_WS_GROUP).get(nb)


#: candidate blocks a program per NB (1 or 2; default 1): with 2, a program covers 2 ``block`` rows
#: (8 or 16 warps of wgmma tiles) and emits the candidates of both blocks, so each x tile brought
#: into shared memory serves twice the rows (the x tiles are 16 KB a stage at NB = 64, twice the
#: block's codes, and every program re-reads them from L2), on the warp-specialized kernel with one
#: 20-warp CTA an SM. H200, 124160 x 5120 g64, fast argmax in the same run (session 27 call b): M = 64
#: INT2 162.8 -> 156.0 us, INT4 292.9 -> 236.4; slower at M <= 32 (INT2 M = 1 76.8 -> 92.6, M = 16
#: 85.0 -> 97.3, M = 32 101.7 -> 112.0; INT4 within 3% or slower), where two 8-warp CTAs an SM win
SPAN: dict = {64: 2}
#: ... where the plane has at least this many 64-byte stages: on a short-K head the epilogue, not x,
#: is the cost (49152 x 576, 3 stages, M = 64, session 27 call e: INT2 38.5 us spanning vs 36.7 one
#: block a program, INT4 42.6 vs 42.9; 124160 x 5120 has 20)
SPAN_MIN_STAGES = 8
#: ``maxnreg`` per NB where a program spans 2 blocks (single-partition loop / warp-specialized
#: kernel): one CTA of 16 (+ the producer's 4) warps an SM; 512 threads launch with <= 128
MAXNREG_SPAN: dict = {8: 128, 16: 128, 32: 128, 64: 128}
#: (16 consumer warps + a producer warpgroup = 640 threads: 96 at launch, which Triton's register
#: split turns into 104 for the consumers and 40 for the producer)
MAXNREG_WS_SPAN: dict = {8: 96, 16: 96, 32: 96, 64: 96}
#: a spanning warp-specialized program's two candidate blocks on two consumer partitions of 8 warps
#: (``_coarse_ws_kernel`` HALVES = 2) instead of one of 16: each partition releases a ring slot on
#: its own, so the two run out of step -- one decodes while the other's wgmmas run -- where the 16
#: warps of one partition meet at a barrier every stage (decode, then all wgmmas, then the wait,
#: the tensor cores idle during the decode); each emits its block with the one-block epilogue
#: (sorted heads, int32 keys). Same candidates. Prepared offline (no H200 in session 35), off
#: until timed: ``scripts/bench_coarse_wgmma.py --paths "default,split span"`` at M = 64
SPLIT_SPAN = False
#: registers of the second consumer partition (a ``setmaxnreg`` of the worker; the first, the
#: default partition, gets what the launch's ``MAXNREG_WS_SPAN`` leaves after both workers)
SPLIT_SPAN_REGS = 112


#: the candidate epilogue by sorted per-thread heads (``gluon_emit._sorted_heads_rounds``: one block a program
#: of 128 tokens) instead of max-and-mask over every element (offline sm_90: 15% fewer epilogue
#: instructions). H200, 124160 x 5120, fast argmax (session 28 call a): INT2 76.6 -> 75.2 /
#: 77.8 -> 76.6 / 84.8 -> 83.2 / 102.0 -> 99.7 us at M = 1 / 8 / 16 / 32, INT4 106.1 -> 105.1 /
#: 108.6 -> 107.6; the coarse pass alone faster at every M measured (0.4-2.7 us), SmolLM2's head too
EMIT_SORTED = True
#: the candidate rounds of a one-block program over the keys' order-preserving int32 bits
#: (``gluon_emit._sorted_heads_rounds`` / ``_max_and_mask`` INTKEYS): a round's maximum by one warp
#: ``redux.sync`` (as its lowest token already is) instead of five shuffle-and-compare steps; the same
#: picks. Offline sm_90, sorted heads: NB = 8 / 16 / 32 every SHFL and FMNMX of the rounds (40 / 80 /
#: 160 each) become 8 / 16 / 32 more REDUX, 1352 -> 1320 / 1624 -> 1568 / 2168 -> 2040 instructions
#: (whole-row kernel), no spills. H200, 124160 x 5120, fast argmax, float keys against int32, median
#: of three alternating rounds (session 33 call a): INT2 +0.8 / +0.7 / +1.2 / +1.8 us at M = 1 / 8 /
#: 16 / 32, INT4 +2.0 / +2.2 / +3.0 / +2.8
EMIT_INT_KEYS = True
#: the max-and-mask rounds (programs of two blocks: NB = 64) write the round's mask before its
#: stores (``gluon_emit._max_and_mask`` MASK_FIRST): the same values, 8 bytes of spills instead of
#: 24 at NB = 64 offline (sm_90). Off: fast argmax at M = 64 INT2 -0.8 us, INT4 +1.0 (session 33 call e, medians of
#: three rounds) -- within the noise either way
EMIT_MASK_FIRST = False


def _emit_mode() -> int:
    """The kernels' EMIT constexpr: bit 0 sorted heads (else max-and-mask), bit 1 int32 keys, bit 2
    max-and-mask's mask first."""
    return (1 if EMIT_SORTED else 0) | (2 if EMIT_INT_KEYS else 0) | (4 if EMIT_MASK_FIRST else 0)


#: x as side-by-side tiles (``x_int8`` ``wide``) for every kernel here: a stage's x in two TMA
#: boxes of NB rows x 32 P bytes instead of P boxes of 2 NB rows x 32 bytes. A read-only ring of
#: the INT2 pass's operands (H200, session 25, ``scripts/probe_coarse_stream.py``): codes + words
#: 49 us, + x in 32-byte rows 64 us at M = 1 (74 at M = 16); the warp-specialized pass with it:
#: M = 1 73.4 -> 67.9 us, M = 16 87.2 -> 75.8, M = 32 118.8 -> 97.3 (call c)
X_WIDE = True


def _resident_fits(block: int, nb: int, p: int, chunks: int, ch: int, stages: int, table: bool) -> bool:
    """Whether the warp-specialized kernel's ring (codes and words of ``stages`` slots of ``ch``
    chunks) plus all ``chunks`` chunks of x (side-by-side tiles [2, NB, 32 P]; per group also the
    sums [4, NB] int32) fit ``RESIDENT_SMEM`` bytes of shared memory."""
    words = 2 * block * 4 if table else 2 * p * block + _zero_box(block)[0] * block
    ring = stages * ch * (block * 64 + words)
    xbytes = chunks * (2 * nb * 32 * p + (0 if table else 16 * nb))
    return ring + xbytes + 1024 <= RESIDENT_SMEM


@functools.cache
def _wide_layout(p: int):
    """Shared layout of a side-by-side x box [NB, 32 P] (int8, rows of 32 P bytes swizzled)."""
    return gl.NVMMASharedLayout(swizzle_byte_width=32 * p, element_bitwidth=8, rank=2)


def _zero_box(rows: int) -> list[int]:
    """The TMA box of a stage's zero bytes for ``rows`` token rows: 128 bytes, so every ring slot it
    lands in stays 128-byte aligned as TMA needs (at 64 rows it takes the next stage's zeros too,
    unread)."""
    return [max(1, 128 // rows), rows]


@functools.cache
def _plain_layout(bitwidth: int):
    """Unswizzled shared layout of a 2-D TMA box of ``bitwidth``-bit elements (read as rows)."""
    return gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=bitwidth, rank=2)


@functools.cache
def _layouts(rows: int, nb: int, ch: int = 1):
    """Shared layouts of the TMA boxes, built once per (CTA height, NB, chunks a stage)."""
    return (gl.NVMMASharedLayout.get_default_for([rows, 64 * ch], gl.uint8),
            gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=2),
            gl.NVMMASharedLayout(swizzle_byte_width=32, element_bitwidth=8, rank=2),
            gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=2))


#: the tail of a one-block-a-program warp-specialized launch of the whole-row variant split by
#: stages: (parts, unit) -- the ``blocks % (unit x SMs)`` last row blocks run as ``parts`` programs
#: of ``1 / parts`` of the stages each, met through a ticket (``_ws_consumer``), so the work past
#: the last whole round of the SMs is spread over more of them. Why: 124160 x 5120 is 970 blocks,
#: 7.35 an SM on 132 SMs; the INT2 coarse pass against N (session 30 call b) runs 924 / 1056 /
#: 1188 blocks (7 / 8 / 9 an SM) on one line of 50 ns a block, and 970 3.6 us above it. H200,
#: fast argmax, same run (session 30 call d, against none): INT2 M = 1 69.5 -> 66.9 us, M = 8 71.0
#: -> 68.7, M = 16 78.2 -> 76.4 with (2, 1); (3, 1) / (4, 1) -1.0..-2.6, (3, 2) / (4, 3) slower.
#: Up to NB = ``SPLIT_TAIL_MAX_NB`` (measured there). (parts < 2: off)
SPLIT_TAIL = (2, 1)
#: the same for the per-group kernel (INT4): off -- every split measured slower (same call: INT4
#: M = 1 / 8 / 16 +0.4..+3.4 us with (2, 1), (3, 1), (4, 1))
SPLIT_TAIL_GROUP = (0, 1)
SPLIT_TAIL_MAX_NB = 16
#: the NB at which the per-group warp-specialized kernel issues all planes' wgmmas of a stage
#: before it waits for the first (``_stage_sum``'s PIPE). Offline sm_90: the stage loop's
#: instructions are the same -- ptxas already retires plane 0 after plane 1's wgmmas -- only the
#: wait between the issues goes; at NB = 64 it spills (two blocks a program, 96 registers) or
#: serializes the wgmmas (80, C7512). H200, 124160 x 5120 INT4, fast argmax against none, same run
#: (session 31): M = 1 / 8 / 16 / 32 -0.2 / -1.0 / -1.9 / -2.2 us (call a), -1.0 / -0.6 / -0.5 /
#: -2.4 (call c, with the 5-byte scales and zeros)
WS_PIPE_GROUP: tuple = (8, 16, 32)
#: the NB at which the per-group warp-specialized kernel converts each plane's int32 wgmma sum to
#: fp32 from a wgmma started at the zero point and the magic offset (``_retire_plane``'s MAGIC 2,
#: ``_plane_start``: IMAD, wgmma, FADD, FFMA an element instead of IMAD, I2F, FFMA -- the same
#: instruction count, the conversion off the I2F pipe); elsewhere I2F (MAGIC 0). H200, 124160 x 5120
#: INT4 fast argmax (session 32): M = 32 136.8-141.0 us (calls c / e) against the previous tree's
#: 143.9-146.9 (sessions 29 / 31; INT2 equal across those machines), -2.0..-2.7 against I2F within
#: a run (call b); M = 16 0.1-0.8 faster; M = 1..8 0.1-0.8 slower (so I2F there). Not at NB = 64: it
#: spills 64 bytes there (two blocks a program, offline sm_90) and ran 238.5-241.6 us against 227.2
#: for the previous tree's I2F (session 31 call d; INT2 M = 64 151.8 / 151.9 on both machines).
#: The plain magic-number add (MAGIC 1) lost by 16 / 40 us at M = 32 / 64 (call a)
WS_MAGIC_GROUP_NB: tuple = (16, 32)
#: the NB at which INT4's plane 1 is decoded in place in the high nibble as ``16 (q - 8)``
#: (``_P1_4_HI``: one LOP3 a word instead of shift and mask -- offline sm_90 the stage loop is 351
#: instead of 376 instructions a 4-stage lap at NB = 8, 464 instead of 490 at NB = 16), its scale
#: and zero corrected per row (``_plane_scale``) -- the same logits bit for bit. Off: not faster end
#: to end at any NB (H200, 124160 x 5120 INT4 fast argmax, same run, session 32 call b, two runs,
#: against the shift: M = 1 -0.6 / -0.3 us, M = 4 / 8 within 0.1 -- inside the ~1 us that a path
#: timed after the default carries in these runs, call e -- M = 16 +2.8 / +2.9 with the coarse
#: pass alone within 0.3, M = 32 equal, M = 64 +3.0 / +2.9)
INT4_HIGH_NIBBLE_NB: tuple = ()
_TICKETS: dict = {}  # device -> zeroed int32 tickets of the split blocks (every launch leaves them zero)
_PARTS: dict = {}  # device -> int32 scratch of the split blocks' partial sums (written before it is read)


def _split_launch(nprog: int, ns: int, rows: int, nb: int, table: bool, device: torch.device, split):
    """(FULL, PARTS, partial-sum buffer, tickets) of a launch of ``nprog`` one-block programs of
    ``ns`` stages under ``split`` = (parts, unit) (see ``SPLIT_TAIL``); (nprog, 1, None, None)
    where nothing is split (no remainder, fewer than two stages a share, parts < 2)."""
    parts, unit = split
    left = nprog % max(1, unit * sm_count(device, interpret=2))
    if parts < 2 or not left or ns < 2 * parts:
        return nprog, 1, None, None
    # both kept per device (no allocation per call): the partial sums are stored before any program
    # reads them, and launches on a stream run one after another (PDL included: every program
    # waits for the previous launch before touching them)
    part = device_state(_PARTS, device, left * parts * rows * nb,
                        lambda d, n: torch.empty(n, dtype=torch.int32, device=d), torch.Tensor.numel)
    tick = device_state(_TICKETS, device, left, lambda d, r: torch.zeros(max(r, 256), dtype=torch.int32, device=d),
                        torch.Tensor.numel)
    return nprog - left, parts, part if table else part.view(torch.float32), tick


def coarse_wgmma(x: torch.Tensor, packed: torch.Tensor, sz: torch.Tensor, *, n: int, bits: int, block: int,
                 kcand: int, write_logits: bool, table_r: torch.Tensor | None = None, stages: int | None = None,
                 pipe: bool | None = None, magic: int | None = None, chunks: int | None = None,
                 maxnreg: int | None = None, ws: bool | None = None, persist: bool | None = None,
                 wide: bool | None = None, pdl: bool | None = None, resident: bool | None = None,
                 span: int | None = None, split: tuple[int, int] | None = None, early: bool | None = None,
                 x_rows_box: bool | None = None, neg_xsum: bool | None = None, split_span: bool | None = None):
    """Launch the int8-wgmma coarse pass (fast mode). ``x`` [M, K] (M <= 64, unit stride along K),
    ``packed`` the INTx plane-split codes uint8 [N, L] (contiguous, L % 64 == 0), ``sz`` from
    :func:`wgmma_sz` -- or, with ``table_r`` (fp32 [N]), the whole-row variant's words and units
    from :func:`wgmma_table`. ``block`` tokens a program (64 or 128: 4 or 8 warps). Returns the six
    ``CoarseOut`` tensors (certified ones empty; logits only if ``write_logits``). ``stages`` /
    ``pipe`` / ``magic`` / ``chunks`` / ``maxnreg`` override the defaults (``_STAGES``, ``PIPE`` /
    ``WS_PIPE_GROUP``, ``MAGIC`` / ``WS_MAGIC_GROUP_NB`` -- 0 I2F, 1 the magic-number add, 2 the
    magic start tile --, ``CHUNKS``, ``MAXNREG`` / ``MAXNREG_TABLE`` / ``_ws_regs`` / ``MAXNREG_WS_SPAN``;
    ``maxnreg=0``: no cap) for tuning; ``ws`` (default: NB <= ``WS_TABLE_MAX_NB``, per group NB <=
    ``WS_GROUP_MAX_NB``) the warp-specialized kernel; ``persist`` (default ``PERSIST_WS``)
    launches it with ``PERSIST_CTAS_PER_SM`` programs an SM looping over the row blocks (where the
    ring divides the stages); ``wide`` (default
    ``X_WIDE``) feeds the kernel x in the side-by-side tile layout (two TMA boxes a stage);
    ``pdl`` (default ``PDL``) launches it as a programmatic dependent launch after the x
    preparation; ``resident`` (default ``X_RESIDENT``) keeps x in shared memory in a persistent
    launch where it fits (``_resident_fits``). ``chunks`` of the warp-specialized kernel default to
    ``WS_CHUNKS``. ``span`` (1 or 2, default ``SPAN``): candidate blocks a program covers (the
    candidates are the same either way; the default needs ``SPAN_MIN_STAGES``). ``split`` ((parts,
    unit), default ``SPLIT_TAIL`` / per group ``SPLIT_TAIL_GROUP`` up to NB = ``SPLIT_TAIL_MAX_NB``): the ``blocks % (unit x SMs)`` last row blocks of a
    one-block-a-program warp-specialized launch are run in ``parts`` shares of their stages each
    (``_split_launch``); parts < 2: none. ``early`` (default ``EARLY_RING``): the PDL launch's first
    ring of weight stages issued before its wait. ``x_rows_box`` (default ``X_ROWS_BOX``): the
    warp-specialized kernel's x boxes only as tall as M rounded up to a power of two (M < 8).
    ``neg_xsum`` (default ``NEG_XSUM``): the per-group kernels fed the x sums negated.
    ``split_span`` (default ``SPLIT_SPAN``): a spanning warp-specialized program's two candidate
    blocks on two consumer partitions."""
    from lowbit.ops.coarse_head.triton import coarse_outputs
    from lowbit.ops.coarse_head.x_int8 import x_int8_tiles

    if _GLUON_IMPORT_ERROR is not None:
        raise RuntimeError(f"coarse_wgmma needs triton.experimental.gluon: {_GLUON_IMPORT_ERROR}")
    m, k = x.shape
    ell = packed.shape[1]
    p = 8 // bits
    if bits not in WGMMA_BITS or not 1 <= m <= WGMMA_MAX_M or block not in (64, 128) or ell % _STAGE_BYTES:
        raise ValueError(f"coarse_wgmma serves bits in {WGMMA_BITS}, 1 <= M <= {WGMMA_MAX_M}, block 64 / 128 and "
                         f"plane lengths % 64 == 0; got bits={bits}, x {tuple(x.shape)}, block={block}, L={ell}")
    if k > p * ell or not packed.is_contiguous() or not sz.is_contiguous():
        raise ValueError(f"coarse_wgmma: K = {k} exceeds the {p} x {ell} packed codes or operands are not contiguous")
    table = table_r is not None
    if table and (bits not in TABLE_BITS or p * ell > TABLE_MAX_K or table_r.shape != (n,)
                  or table_r.dtype != torch.float32):
        raise ValueError(f"coarse_wgmma's whole-row variant serves bits in {TABLE_BITS}, padded K <= {TABLE_MAX_K} "
                         f"and row units fp32 [{n}]; got bits={bits}, padded K {p * ell}, units "
                         f"{tuple(table_r.shape)} {table_r.dtype}")
    if table and (sz.dtype != torch.int32 or sz.shape != (2 * (ell // _STAGE_BYTES), -(-n // 4) * 4)):
        raise ValueError(f"coarse_wgmma's whole-row variant takes wgmma_table's int32 words "
                         f"[{2 * (ell // _STAGE_BYTES)}, {-(-n // 4) * 4}], got {sz.dtype} {tuple(sz.shape)}")
    sz_bytes = wgmma_sz_bytes(n, bits, ell)
    if not table and (sz.dtype != torch.uint8 or sz.shape != (sz_bytes,)):
        raise ValueError(f"coarse_wgmma takes wgmma_sz's uint8 buffer of scales and zeros [{sz_bytes}], "
                         f"got {sz.dtype} {tuple(sz.shape)}")
    if x.stride(1) != 1:
        x = x.contiguous()
    nb = max(8, triton.next_power_of_2(m))
    sub = (SPAN.get(nb, 1) if ell // _STAGE_BYTES >= SPAN_MIN_STAGES else 1) if span is None else span
    if sub not in (1, 2):
        raise ValueError(f"coarse_wgmma span must be 1 or 2, got {span}")
    # a program spanning two blocks always takes the warp-specialized kernel (the single-partition
    # loop of 16 warps measured slower at every M: session 27 call b)
    use_ws = (sub == 2 or nb <= (WS_TABLE_MAX_NB if table else WS_GROUP_MAX_NB)) if ws is None else ws
    ch = (WS_CHUNKS.get(nb, 1) if use_ws else CHUNKS) if chunks is None else chunks
    if ch not in (1, 2):
        raise ValueError(f"coarse_wgmma chunks must be 1 or 2, got {chunks}")
    if (ell // _STAGE_BYTES) % ch:
        ch = 1
    ns = ell // _STAGE_BYTES // ch
    rows = block * sub  # rows a program
    w = rows // 16
    nblk = -(-n // block)  # candidate blocks
    nprog = -(-n // rows)
    x_wide = X_WIDE if wide is None else wide
    use_pdl = use_ws and (PDL if pdl is None else pdl) and not interpret_mode()
    # the whole-row decode's K order, side by side (X_WIDE); the early trigger lets the PDL launch
    # of the warp-specialized kernel place its CTAs while x is prepared
    negxs = (NEG_XSUM if neg_xsum is None else neg_xsum) and not table  # the whole-row variant reads no x sums
    xq, xs, sx = x_int8_tiles(x, ell, p, nb, perm=table, wide=x_wide, trigger=use_pdl, neg_sums=negxs)
    cand_key, cand_lb, cand_idx, block_lb, block_rest, logits = coarse_outputs(m, n, nblk, kcand, False,
                                                                               write_logits, x.device)
    w_l, sz_l, x_l, xs_l = _layouts(rows, nb, ch)
    w_desc = TensorDescriptor.from_tensor(packed, [rows, 64 * ch], w_l)
    if table:  # the group codes; no zero bytes (the codes' descriptor stands in, unread)
        sz_desc = z_desc = TensorDescriptor.from_tensor(sz, [2, rows], sz_l)
    else:  # the P planes' fp16 scales and the byte of their zeros, a box each per stage
        scales, zeros = wgmma_sz_views(sz, bits, ell)
        sz_desc = TensorDescriptor.from_tensor(scales, [p, rows], _plain_layout(16))
        z_desc = TensorDescriptor.from_tensor(zeros, _zero_box(rows), _plain_layout(8))
    if x_wide:
        # X_ROWS_BOX (warp-specialized kernels): a box of the rows of x there are, rounded up to a power of two
        xr = min(nb, triton.next_power_of_2(m)) if use_ws and (X_ROWS_BOX if x_rows_box is None else x_rows_box) else nb
        x_desc = TensorDescriptor.from_tensor(xq, [xr, 32 * p], _wide_layout(p))
    else:
        x_desc = TensorDescriptor.from_tensor(xq, [2 * nb, 32], x_l)
    xs_desc = TensorDescriptor.from_tensor(xs, [4, nb], xs_l)
    st = stages if stages is not None else (_STAGES_2CH if ch == 2 else _STAGES_SPAN if sub == 2 else _STAGES)[nb]
    if maxnreg is not None:
        cap = maxnreg
    elif sub == 2:
        cap = (MAXNREG_WS_SPAN if use_ws else MAXNREG_SPAN).get(nb)
    elif use_ws:
        cap = _ws_regs(nb, table, ns * ch)
    else:
        cap = (MAXNREG_TABLE if table else MAXNREG).get(nb)
    reg = {"maxnreg": cap} if cap else {}
    hi = nb in INT4_HIGH_NIBBLE_NB and bits == 4 and not table  # INT4 plane 1 read in its high nibble
    if use_ws:
        grid = nprog
        if (PERSIST_WS if persist is None else persist) and ns % st == 0:
            grid = min(nprog, (PERSIST_CTAS_PER_SM if sub == 1 else 1) * sm_count(x.device, interpret=2))
        xres = ns * ch if (grid < nprog and x_wide and (X_RESIDENT if resident is None else resident)
                           and _resident_fits(rows, nb, p, ns * ch, ch, st, table)) else 0
        full, parts, part, tick = nprog, 1, sx, sx
        if grid == nprog and sub == 1 and not xres:
            if split is None:
                split = (SPLIT_TAIL if table else SPLIT_TAIL_GROUP) if nb <= SPLIT_TAIL_MAX_NB else (0, 1)
            full, parts, part, tick = _split_launch(nprog, ns, rows, nb, table, x.device, split)
            grid = full + (nprog - full) * parts
            if parts == 1:
                part = tick = sx  # unread
        # the first weight stages before the PDL wait (a resident x has no ring stages of x to follow)
        early = use_pdl and not xres and (EARLY_RING if early is None else early)
        # a spanning program's blocks on two consumer partitions of w / 2 warps (launched with those)
        halves = 2 if sub == 2 and (SPLIT_SPAN if split_span is None else split_span) else 1
        _coarse_ws_kernel[(grid,)](w_desc, sz_desc, z_desc, x_desc, xs_desc, sx, table_r if table else sx, cand_key,
                                   cand_idx, logits if write_logits else cand_key, m, n, nblk, ns, grid, NB=nb, P=p,
                                   STAGES=st, KCAND=kcand, WRITE_LOGITS=write_logits, W=w, PRODUCER_REGS=PRODUCER_REGS,
                                   XW=x_wide, CH=ch, PDL=use_pdl, TABLE=table, BITS=bits, XRES=xres, SUB=sub,
                                   EMIT=_emit_mode(), LATE=nb >= LATE_TRIGGER_MIN_NB, part_ptr=part,
                                   tick_ptr=tick, FULL=full, PARTS=parts,
                                   GPIPE=(nb in WS_PIPE_GROUP if pipe is None else pipe) and not table,
                                   GMAGIC=0 if table else ((2 if nb in WS_MAGIC_GROUP_NB else 0) if magic is None
                                                           else int(magic)),
                                   HI=hi, EARLY=early, NEGXS=negxs, HALVES=halves,
                                   CONSUMER_REGS=SPLIT_SPAN_REGS if halves == 2 else 0, num_warps=w // halves, **reg,
                                   **({"launch_pdl": True} if use_pdl else {}))
        return cand_key, cand_lb, cand_idx, block_lb, block_rest, logits
    _coarse_wgmma_kernel[(nprog,)](w_desc, sz_desc, z_desc, x_desc, xs_desc, sx, table_r if table else sx, cand_key,
                                  cand_idx, logits if write_logits else cand_key, m, n, nblk, ns, NB=nb, P=p, BITS=bits,
                                  STAGES=st, KCAND=kcand, WRITE_LOGITS=write_logits, W=w,
                                  PIPE=PIPE if pipe is None else pipe, MAGIC=MAGIC if magic is None else magic,
                                  CH=ch, TABLE=table, XW=x_wide, SUB=sub, EMIT=_emit_mode(),
                                  HI=hi, NEGXS=negxs, num_warps=w, **reg)
    return cand_key, cand_lb, cand_idx, block_lb, block_rest, logits
