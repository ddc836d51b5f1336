"""Fast-mode coarse pass on Hopper's int8 wgmma (Gluon): INT2 / INT4 plane-split codes times int8
rows of x, for M = 1..64 rows of x in one launch.

Why: the ``mma.sync`` pass serves 16 rows of x a launch and re-reads the codes for every 16 more;
the head's product is 2 N K M operations (81 GFLOP for 124160 x 5120 at M = 64), too many for
bf16 tensor cores in the 3x-cuBLAS budget, but the integer codes multiply int8 x exactly at twice
the rate, and integer sums make the zero point exact:

    logit[m, n] = sx[m] * sum_{(s, j)} scale[n, g(s, j)] * (sum_k q[n, k] xq[m, k] - z[n, g] xsum[m, s, j])

over the 64-byte stages s of the packed rows and their P = 8 / bits planes j (one 64-wide K run
of one group each: g64-multiple groups). ``xq`` / ``sx`` / ``xsum``: ``x_int8.py``.

Program: ``R = 16 W`` consecutive tokens (one or two candidate blocks) against all NB (8..64) rows
of x. Per stage, TMA brings the tokens' 64 packed bytes, their P fp16 scales and the byte of their
P zero points (``wgmma_pack.wgmma_sz``) and the stage's x tiles into a ring of STAGES slots. Each
warp reads its A fragments of a 32-byte half straight from shared memory in the register layout of
``wgmma.m64nNk32.s8`` (lane (g, t): bytes 4t..4t+3 and 16+4t.. of rows g and g+8), extracts plane
j with one shift-and-mask per word (the codes are already small non-negative int8), and issues two
async wgmmas (the two halves, K = 64) against the plane's x tile (the B operand, K-major in shared
memory). The int32 result loses the zero point (``- z xsum``, exact), is converted and multiplied
by the fp16 group scale into the fp32 accumulator. At the end: times ``sx``, then the block's
``KCAND`` best keys per row of x (ties to the lower token index; ``wgmma_emit.py``) -- the fast-mode
candidates contract of the other coarse kernels.

**Whole-row integer variant** (``TABLE``, INT2): the group scale is rounded to an integer multiple
of one fp32 unit per token row, ``s_g ~= A_g r_n`` (``wgmma_pack.wgmma_table``, ``|A_g (q - z_g)|
<= 127``), so a code decodes straight to the int8 weight ``A_g (q - z_g)``: the group's 4 possible
weights are the bytes of one word, built from the group's 16-bit code ``A | (128 - A z) << 8`` (4
ops, ``_tables``; 2 bytes a group against the format's 3 of scale and zero), and ``prmt`` picks 4
of them by 4 codes at once (``_prmt_word``: 9 ops for a packed word of 16 codes, the x tiles in the
matching K order of ``x_int8.prmt_source``). The row's dot accumulates in int32 over all of K in
one wgmma chain::

    logit[m, n] = sx[m] r[n] sum_k A_g(k) (q[n, k] - z[n, g(k)]) xq[m, k]

No per-group epilogue and no x sums: the decode is the only per-code work. The rounding of the
scales is a further approximation of fast mode's coarse logits (0.7% rms on SmolLM2's head, its
fast-mode argmax agreement and recall unchanged; docs/draft_head.md).

Two kernels: ``_coarse_ws_kernel`` (a 1-warp TMA producer partition and the wgmma consumers; every
launch but one) and ``_coarse_wgmma_kernel`` (single partition), which serves NB = 64 on heads too
short for a program to span two blocks. :func:`launch_config` says which runs, and how, for a call.

Gluon does not run under ``TRITON_INTERPRET``: the kernels are tested on the GPU tier
(tests/ops/test_coarse_wgmma.py); the launch configuration, the x preparation and the packing
layouts have CPU tests.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import triton

from lowbit._backend import sm_count
from lowbit.ops.coarse_head.scratch import device_state
from lowbit.ops.coarse_head.wgmma_pack import STAGE_BYTES, TABLE_BITS, wgmma_sz_bytes, wgmma_sz_views

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
    from lowbit.ops.coarse_head.wgmma_emit import block_logits, emit_candidates

    GLUON_ERROR = None
except Exception as e:  # noqa: BLE001 - any failure means "no Gluon path"
    GLUON_ERROR = e

__all__ = ["GLUON_ERROR", "WGMMA_BITS", "WGMMA_MAX_M", "WgmmaConfig", "coarse_wgmma", "launch_config",
           "wgmma_available"]

#: most rows of x one launch serves (the wgmma's N)
WGMMA_MAX_M = 64
#: INTx widths the kernel decodes (INT8 would need x's int8 rounding to be small against the
#: weights' own error; it keeps the other paths)
WGMMA_BITS = (2, 4)
#: longest padded K of the whole-row variant: its int32 sums of |A (q - z) xq| <= 127^2 stay exact
TABLE_MAX_K = 131072


if GLUON_ERROR is None:
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

    # INT4 plane j's codes of a word of packed bytes, as 4 int8 (one shift-and-mask; INT2 takes the
    # whole-row variant's byte-permute decode)
    _P0_4 = gl.constexpr("and.b32 $0, $1, 0x0F0F0F0F;")
    _P1_4 = gl.constexpr("{.reg .b32 a; shr.u32 a, $1, 4; and.b32 $0, a, 0x0F0F0F0F;}")

    @gluon.jit
    def _asm_plane(q, ASM: gl.constexpr):
        return gl.inline_asm_elementwise(ASM, "=r,r", [q], dtype=gl.int8, is_pure=True, pack=4)

    @gluon.jit
    def _plane(q, J: gl.constexpr, BITS: gl.constexpr):
        """INT4 plane J's codes of the packed bytes ``q`` (uint8, 4 a word) as int8, one op a word."""
        gl.static_assert(BITS == 4, "the per-group pass decodes INT4 (INT2 runs the whole-row variant)")
        if J == 0:
            r = _asm_plane(q, _P0_4)
        else:
            r = _asm_plane(q, _P1_4)
        return r

    @gluon.jit
    def _issue_stage(w_desc, sz_desc, x_desc, xs_desc, w_bufs, sz_bufs, x_bufs, xs_bufs, bars, i, row0,
                     STAGES: gl.constexpr, P: gl.constexpr, NB: gl.constexpr, pred, TABLE: gl.constexpr = False,
                     K0=0, z_desc=None, z_bufs=None, PART: gl.constexpr = 0):
        """TMA of stage c = K0 + i into ring slot i % STAGES: codes [R, 64]; the fp16 scales [P, R]
        and zero bytes [128 / R, R] (``z_desc`` / ``z_bufs``, ``_zero_box``; TABLE: the group codes
        [2, R] instead); the two halves' x tiles [NB, 32 P] (``x_int8``'s side-by-side layout); and
        (not with TABLE, which needs none) the x sums [4, NB]. PART: 0 the whole stage; 1 the slot's barrier armed
        for the whole stage but only the weight side issued; 2 only the x side, on the barrier
        PART 1 armed (``_ws_producer``'s early ring)."""
        slot = i % STAGES
        bar = bars.index(slot)
        XB: gl.constexpr = x_desc.block_type.nbytes
        XSB: gl.constexpr = 0 if TABLE else xs_desc.block_type.nbytes
        ZB: gl.constexpr = 0 if TABLE else z_desc.block_type.nbytes
        nbytes: gl.constexpr = w_desc.block_type.nbytes + sz_desc.block_type.nbytes + ZB + 2 * XB + XSB
        if PART != 2:
            mbarrier.expect(bar, nbytes, pred=pred)
            tma.async_copy_global_to_shared(w_desc, [row0, (K0 + i) * 64], bar, w_bufs.index(slot), pred)
        c = K0 + i  # the stage's index in the plane
        if PART != 2:
            if TABLE:  # stage-major group codes (``wgmma_table``): rows 2 c, 2 c + 1 of the block's tokens
                tma.async_copy_global_to_shared(sz_desc, [2 * c, row0], bar, sz_bufs.index(slot), pred)
            else:  # the P planes' scales, then the byte of their zeros
                tma.async_copy_global_to_shared(sz_desc, [P * c, row0], bar, sz_bufs.index(slot), pred)
                tma.async_copy_global_to_shared(z_desc, [c, row0], bar, z_bufs.index(slot), pred)
        if PART != 1:
            for j in gl.static_range(2):
                tma.async_copy_global_to_shared(x_desc, [(c * 2 + j) * NB, 0], bar, x_bufs.index(slot * 2 + j), pred)
            if not TABLE:
                tma.async_copy_global_to_shared(xs_desc, [c * 4, 0], bar, xs_bufs.index(slot), pred)

    @gluon.jit
    def _x_tile(x_bufs, u, J: gl.constexpr, h: gl.constexpr):
        """The B operand [32, NB] of (ring slot u, plane / register J, half h): the 32-byte column
        slice J of the side-by-side tile."""
        b = x_bufs.index(2 * u + h).slice(32 * J, 32, dim=1)
        return b.permute((1, 0))

    @gluon.jit
    def _issue_plane(q0, q1, x_bufs, slot, J: gl.constexpr, start, a_l: gl.constexpr, BITS: gl.constexpr,
                     FROM_START: gl.constexpr = False):
        """Plane J of the stage in ``slot``: decode both 32-byte halves, start their two wgmmas
        (K = 64) from zero -- FROM_START: from the int32 tile ``start`` (``_plane_start``);
        returns the in-flight token."""
        a0 = gl.convert_layout(_plane(q0, J, BITS), a_l, assert_trivial=True)
        a1 = gl.convert_layout(_plane(q1, J, BITS), a_l, assert_trivial=True)
        d = warpgroup_mma(a0, _x_tile(x_bufs, slot, J, 0), start, use_acc=FROM_START, is_async=True)
        return warpgroup_mma(a1, _x_tile(x_bufs, slot, J, 1), d, is_async=True)

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
        """The int32 tile a plane's wgmmas start from under MAGIC: ``0x4B400000 - zero * xsum`` per
        element (one IMAD with an immediate). The wgmma sum lands on it, so the result is the fp32
        bit pattern of ``1.5 * 2^23 + (d - zero * xsum)`` -- the zero point removed and the
        int32 -> fp32 conversion's offset added by the instruction that had to set the tile anyway
        (exact while |d - zero * xsum| < 2^22: 2 x 64 codes < 16 times |x| <= 127)."""
        return gl.expand_dims(nz, 1) * gl.expand_dims(xs, 0) + _MAGIC_I

    @gluon.jit
    def _retire_plane(acc, d, sc, nz, xs_rows, i, col_l: gl.constexpr, MAGIC: gl.constexpr):
        """acc += scale * (d - zero * xsum) for one finished plane (``sc`` fp32 / ``nz`` int32 minus
        the zero, per row: ``_plane_scales``; xsum: row ``i`` of ``xs_rows``, read here, after the
        wgmmas, so it is not live across them): the zero point removed exactly in int32, then I2F;
        MAGIC: ``d`` started from ``_plane_start`` (zero and offset already in it; no x sum read),
        so one FADD replaces the IMAD and the I2F -- I2F runs at a fraction of the FP32 pipes'
        rate, and at NB = 16 the pass converts ~1.2 M values an SM (124160 x 5120 INT4)."""
        if MAGIC:
            f = d.to(gl.float32, bitcast=True) - _MAGIC_F
        else:
            xs = xs_rows.index(i).load(col_l)
            d = gl.expand_dims(nz, 1) * gl.expand_dims(xs, 0) + d  # one IMAD an element
            f = d.to(gl.float32)
        return acc + f * gl.expand_dims(sc, 1)

    @gluon.jit
    def _plane_scale(scale_rows, zb, u, J: gl.constexpr, P: gl.constexpr, BITS: gl.constexpr,
                     row_l: gl.constexpr):
        """(fp32 scale, int32 minus the zero) per token row of plane J of ring slot ``u``:
        ``scale_rows`` row P u + J, the zero from bits BITS J.. of the slot's zero bytes ``zb``."""
        sc = scale_rows.index(P * u + J).load(row_l).to(gl.float32)
        z = (zb >> (BITS * J)) & ((1 << BITS) - 1)
        return sc, -z

    @gluon.jit
    def _plane_scales(scale_rows, z_rows, u, P: gl.constexpr, BITS: gl.constexpr, row_l: gl.constexpr):
        """The 4 planes' (scale, minus zero) of ring slot ``u`` (:func:`_plane_scale`); planes
        j >= P repeat plane 0's (never read). All loaded before the stage's first wgmma."""
        ZR: gl.constexpr = z_rows.shape[0] * P // scale_rows.shape[0]  # rows of a stage's zero box
        zb = z_rows.index(ZR * u).load(row_l).to(gl.int32)
        s0, z0 = _plane_scale(scale_rows, zb, u, 0, P, BITS, row_l)
        s1, z1 = _plane_scale(scale_rows, zb, u, 1, P, BITS, row_l)
        if P == 4:
            s2, z2 = _plane_scale(scale_rows, zb, u, 2, P, BITS, row_l)
            s3, z3 = _plane_scale(scale_rows, zb, u, 3, P, BITS, row_l)
        else:
            s2 = s0
            z2 = z0
            s3 = s0
            z3 = z0
        return (s0, s1, s2, s3), (z0, z1, z2, z3)

    @gluon.jit
    def _stage_sum(acc, w_bufs, scale_rows, x_bufs, xs_rows, slot, NB: gl.constexpr, W: gl.constexpr,
                   P: gl.constexpr, BITS: gl.constexpr, PIPE: gl.constexpr, MAGIC: gl.constexpr, z_rows=None):
        """acc += the P planes of the stage in ring slot ``slot``: its scales in ``scale_rows`` (the
        [slots P, R] fp16 rows of the scale buffers), zero bytes in ``z_rows``, x tiles and sums
        in the slot's x buffers. PIPE: plane j + 1's wgmmas are started before plane j is retired
        (its integer / fp32 epilogue overlaps them). MAGIC: see ``_retire_plane``."""
        R: gl.constexpr = 16 * W
        mma: gl.constexpr = acc_layout(NB, W)
        a_l: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=4)
        row_l: gl.constexpr = gl.SliceLayout(1, mma)
        col_l: gl.constexpr = gl.SliceLayout(0, mma)
        wb = w_bufs.index(slot)
        izero = gl.zeros([R, NB], gl.int32, mma)
        q0 = wb.slice(0, 32, dim=1).load(_codes_layout(W))
        q1 = wb.slice(32, 32, dim=1).load(_codes_layout(W))
        scs, nzs = _plane_scales(scale_rows, z_rows, slot, P, BITS, row_l)
        # the x sums are read where they are used -- by _start_tile before the wgmmas (MAGIC), else
        # by _retire_plane after them: loaded early they stay live across the wgmmas, and at NB = 64
        # that spilled (offline sm_90, two blocks a program)
        if PIPE:
            d = _issue_plane(q0, q1, x_bufs, slot, 0, _start_tile(nzs[0], xs_rows, 4 * slot, izero, col_l, MAGIC),
                             a_l, BITS, MAGIC)
            for j in gl.static_range(1, P):
                d_next = _issue_plane(q0, q1, x_bufs, slot, j,
                                      _start_tile(nzs[j], xs_rows, 4 * slot + j, izero, col_l, MAGIC), a_l, BITS,
                                      MAGIC)
                d = warpgroup_mma_wait(num_outstanding=2, deps=(d,))
                acc = _retire_plane(acc, d, scs[j - 1], nzs[j - 1], xs_rows, 4 * slot + j - 1, col_l, MAGIC)
                d = d_next
            d = warpgroup_mma_wait(num_outstanding=0, deps=(d,))
            acc = _retire_plane(acc, d, scs[P - 1], nzs[P - 1], xs_rows, 4 * slot + P - 1, col_l, MAGIC)
        else:
            for j in gl.static_range(P):
                d = _issue_plane(q0, q1, x_bufs, slot, j, _start_tile(nzs[j], xs_rows, 4 * slot + j, izero, col_l,
                                                                      MAGIC), a_l, BITS, MAGIC)
                d = warpgroup_mma_wait(num_outstanding=0, deps=(d,))
                acc = _retire_plane(acc, d, scs[j], nzs[j], xs_rows, 4 * slot + j, col_l, MAGIC)
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
    def _chunk_tables(code_rows, u, r_l: gl.constexpr):
        """The byte tables of planes 0..3 (int32 [R, 1] each, rows in ``r_l``) of ring slot ``u``'s
        group codes (``code_rows`` rows 2 u, 2 u + 1)."""
        t0, t1 = _tables(code_rows.index(2 * u).load(r_l))
        t2, t3 = _tables(code_rows.index(2 * u + 1).load(r_l))
        return gl.expand_dims(t0, 1), gl.expand_dims(t1, 1), gl.expand_dims(t2, 1), gl.expand_dims(t3, 1)

    @gluon.jit
    def _prmt_word(q, t0, t2, t1, t3):
        """The 4 int8 weight tensors (each like ``q``, uint8 [R, 32]) of the packed bytes ``q``; ``t*``
        int32 [R, 1]: the row's byte tables of planes 0..3 (``wgmma_pack.wgmma_table``)."""
        return gl.inline_asm_elementwise(_PRMT_ASM, _PRMT_CONSTRAINTS, [q, t0, t2, t1, t3],
                                         dtype=(gl.int8, gl.int8, gl.int8, gl.int8), is_pure=True, pack=4)

    @gluon.jit
    def _stage_sum_table(acc, w_bufs, code_rows, x_bufs, slot, NB: gl.constexpr, W: gl.constexpr):
        """acc (int32) += the stage in ring slot ``slot``, whole-row variant: the rows' byte tables
        built from their group codes (``_chunk_tables``; ``code_rows``: the codes buffer [slots,
        2, R] as rows of R), both 32-byte halves decoded (``_prmt_word``: 4 registers of weights
        each) before the first of its 8 wgmmas is issued -- ptxas serializes wgmmas whose register
        inputs are defined after the first one starts (C7513) -- then one wgmma chain; all retired
        on return (the caller refills the slot next). The B operand of (register j, half h) is the
        32-byte column slice j of the slot's side-by-side x tile h."""
        mma: gl.constexpr = acc_layout(NB, W)
        a_l: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=4)
        c_l: gl.constexpr = _codes_layout(W)
        r_l: gl.constexpr = gl.SliceLayout(1, c_l)
        wb = w_bufs.index(slot)
        t0, t1, t2, t3 = _chunk_tables(code_rows, slot, r_l)
        v0 = _prmt_word(wb.slice(0, 32, dim=1).load(c_l), t0, t2, t1, t3)
        v1 = _prmt_word(wb.slice(32, 32, dim=1).load(c_l), t0, t2, t1, t3)
        for h in gl.static_range(2):
            for j in gl.static_range(4):
                a = gl.convert_layout((v0 if h == 0 else v1)[j], a_l, assert_trivial=True)
                acc = warpgroup_mma(a, _x_tile(x_bufs, slot, j, h), acc, is_async=True)
        return warpgroup_mma_wait(num_outstanding=0, deps=(acc,))

    @gluon.jit
    def _alloc_operands(w_desc, sz_desc, x_desc, xs_desc, STAGES: gl.constexpr, R: gl.constexpr, NB: gl.constexpr,
                        P: gl.constexpr, TABLE: gl.constexpr, TABLE_NO_XS: gl.constexpr, z_desc):
        """The ring's shared-memory buffers and their views: codes [STAGES, R, 64]; the words --
        TABLE: group codes int32 [STAGES, 2, R], else the fp16 scales [STAGES, P, R] (``code_rows``:
        either as rows of R) and the zero bytes [STAGES, ZR, R] (``z_bufs``, rows ``z_rows``; ZR =
        128 / R rows of the zeros' box, the stage's and at R = 64 the next one's, unread, so every
        slot stays 128-byte aligned as TMA needs; TABLE: none, the group codes' buffers stand in)
        -- the side-by-side x tiles [2 STAGES, NB, 32 P] and the x sums [STAGES, 4, NB]
        (``xs_rows``: rows of NB; TABLE_NO_XS: a [1, 4, NB] placeholder for TABLE, which reads
        none). Returns (w_bufs, sz_bufs, code_rows, x_bufs, xs_bufs, xs_rows, z_bufs, z_rows)."""
        rows_sl: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
        w_bufs = gl.allocate_shared_memory(gl.uint8, [STAGES, R, 64], w_desc.layout)
        if TABLE:
            sz_bufs = gl.allocate_shared_memory(gl.int32, [STAGES, 2, R], sz_desc.layout)
            code_rows = sz_bufs._reinterpret(gl.int32, [STAGES * 2, R], rows_sl)
            z_bufs = sz_bufs
            z_rows = code_rows
        else:
            sz_bufs = gl.allocate_shared_memory(gl.float16, [STAGES, P, R], sz_desc.layout)
            code_rows = sz_bufs._reinterpret(gl.float16, [STAGES * P, R], rows_sl)
            ZR: gl.constexpr = z_desc.block_type.shape[0]  # 128 // R rows: every slot 128-byte aligned for TMA
            z_bufs = gl.allocate_shared_memory(gl.uint8, [STAGES, ZR, R], z_desc.layout)
            z_rows = z_bufs._reinterpret(gl.uint8, [STAGES * ZR, R], rows_sl)
        if TABLE and TABLE_NO_XS:
            xs_bufs = gl.allocate_shared_memory(gl.int32, [1, 4, NB], xs_desc.layout)  # unused
            xs_rows = xs_bufs
        else:
            xs_bufs = gl.allocate_shared_memory(gl.int32, [STAGES, 4, NB], xs_desc.layout)
            xs_rows = xs_bufs._reinterpret(gl.int32, [STAGES * 4, NB], rows_sl)
        # the side-by-side tiles: their TMA box is the wgmmas' B tile, 32 P-byte rows
        x_bufs = gl.allocate_shared_memory(gl.int8, [STAGES * 2, NB, 32 * P], x_desc.layout)
        return w_bufs, sz_bufs, code_rows, x_bufs, xs_bufs, xs_rows, z_bufs, z_rows

    @gluon.jit(do_not_specialize=["M", "N", "NBLK", "NS"])
    def _coarse_wgmma_kernel(w_desc, sz_desc, z_desc, x_desc, xs_desc, sx_ptr, r_ptr, ck_ptr, ci_ptr, lg_ptr, M, N,
                             NBLK, NS, NB: gl.constexpr, P: gl.constexpr, BITS: gl.constexpr, STAGES: gl.constexpr,
                             KCAND: gl.constexpr, WRITE_LOGITS: gl.constexpr, W: gl.constexpr,
                             TABLE: gl.constexpr = False):
        """Program b: tokens R b .. R b + R - 1 (R = 16 W, one candidate block) against the NB rows
        of x; writes the KCAND candidates of every row m < M (``ck`` fp32 / ``ci`` int64 [M, NBLK
        KCAND], NBLK candidate blocks) and, if WRITE_LOGITS, its coarse logits into ``lg`` fp32
        [M, N]. TABLE: the whole-row variant (``sz_desc`` holds ``wgmma_table``'s words, ``r_ptr``
        its fp32 [N] units; x tiles in ``x_int8.prmt_source`` order)."""
        R: gl.constexpr = 16 * W
        mma: gl.constexpr = acc_layout(NB, W)
        col_l: gl.constexpr = gl.SliceLayout(0, mma)

        pid = gl.program_id(0)
        row0 = pid * R
        w_bufs, sz_bufs, code_rows, x_bufs, xs_bufs, xs_rows, z_bufs, z_rows = _alloc_operands(
            w_desc, sz_desc, x_desc, xs_desc, STAGES, R, NB, P, TABLE, False, z_desc)
        bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(STAGES):
            mbarrier.init(bars.index(i), count=1)
        fence_async_shared()

        for i in gl.static_range(STAGES - 1):
            _issue_stage(w_desc, sz_desc, x_desc, xs_desc, w_bufs, sz_bufs, x_bufs, xs_bufs, bars, i, row0, STAGES,
                         P, NB, i < NS, TABLE, z_desc=z_desc, z_bufs=z_bufs)
        acc = gl.zeros([R, NB], gl.int32 if TABLE else gl.float32, mma)
        for i in range(0, NS):
            # slot (i - 1) % STAGES was read by stage i - 1: once every warp is past it, refill it
            gl.thread_barrier()
            _issue_stage(w_desc, sz_desc, x_desc, xs_desc, w_bufs, sz_bufs, x_bufs, xs_bufs, bars, i + STAGES - 1,
                         row0, STAGES, P, NB, i + STAGES - 1 < NS, TABLE, z_desc=z_desc, z_bufs=z_bufs)
            slot = i % STAGES
            mbarrier.wait(bars.index(slot), (i // STAGES) & 1)
            if TABLE:
                acc = _stage_sum_table(acc, w_bufs, code_rows, x_bufs, slot, NB, W)
            else:
                acc = _stage_sum(acc, w_bufs, code_rows, x_bufs, xs_rows, slot, NB, W, P, BITS, False, False, z_rows)
        for i in gl.static_range(STAGES):
            mbarrier.invalidate(bars.index(i))

        sx = gl.load(sx_ptr + gl.arange(0, NB, layout=col_l))
        out = block_logits(acc, sx, r_ptr, row0, N, R, mma, TABLE)
        emit_candidates(out, row0, pid, ck_ptr, ci_ptr, lg_ptr, M, N, NBLK, NB, W, KCAND, WRITE_LOGITS)

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
    def _ws_consumer(w_bufs, code_rows, x_bufs, xs_rows, ready, empty, sx_ptr, r_ptr, ck_ptr, ci_ptr, lg_ptr, M,
                     N, NBLK, NS, GRID, NB: gl.constexpr, P: gl.constexpr, BITS: gl.constexpr, STAGES: gl.constexpr,
                     KCAND: gl.constexpr, WRITE_LOGITS: gl.constexpr, W: gl.constexpr, TABLE: gl.constexpr,
                     SUB: gl.constexpr = 1, LATE: gl.constexpr = False, part_ptr=None, tick_ptr=None, FULL=0,
                     PARTS: gl.constexpr = 1, PIPE: gl.constexpr = False, z_rows=None, MAGIC: gl.constexpr = False):
        """Consumer partition (W warps), for each row block ``pid, pid + GRID, ...`` (one: GRID is
        the launch's program count): per stage, wait for its TMA, run the stage (TABLE: the
        whole-row decode and wgmma chain into an int32 sum; else the per-group planes,
        ``_stage_sum``, into fp32), hand the slot back (partition barrier, one arrive); then the
        block's epilogue. Nothing global is read before ``griddepcontrol.wait`` (``sx`` is the x
        preparation's output); then the next PDL launch (the selection) may place its CTAs --
        LATE: only once the program's blocks are done. The stage loop is unrolled by the ring, so
        every slot's shared-memory addresses (the wgmma descriptors) are compile-time constants
        instead of arithmetic on ``i % STAGES``. A row block is SUB candidate blocks (NBLK of those
        in all).

        PARTS > 1 (one block a program, ``_split_range``): programs from FULL on each run a 1 / PARTS
        share of a block's stages; each stores its partial sum into ``part_ptr`` and takes a ticket
        of the block (``tick_ptr``), and the last to arrive adds the PARTS partial sums (in part
        order, so the result does not depend on who arrives last), resets the ticket and emits the
        block's candidates.

        Not done, and why: releasing a slot one stage late (its wgmmas running on while the next
        stage is decoded) is what ptxas forbids for register A operands -- it then serializes
        every wgmma (C7513); 2 or 4 independent accumulators measured within 1%."""
        R: gl.constexpr = 16 * W
        mma: gl.constexpr = acc_layout(NB, W)
        gdc_wait()
        if not LATE:
            gdc_launch_dependents()
        sx = gl.load(sx_ptr + gl.arange(0, NB, layout=gl.SliceLayout(0, mma)))
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
                            acc = _stage_sum_table(acc, w_bufs, code_rows, x_bufs, slot, NB, W)
                        else:
                            acc = _stage_sum(acc, w_bufs, code_rows, x_bufs, xs_rows, slot, NB, W, P, BITS, PIPE,
                                             MAGIC, z_rows)
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
                                     WRITE_LOGITS)
            else:
                out = block_logits(acc, sx, r_ptr, blk * R, N, R, mma, TABLE)
                emit_candidates(out, blk * R, blk, ck_ptr, ci_ptr, lg_ptr, M, N, NBLK, NB, W, KCAND, WRITE_LOGITS)
        else:
            lap0 = 0  # ring laps before this block
            for blk in range(gl.program_id(0), (NBLK + SUB - 1) // SUB, GRID):
                row0 = blk * R
                acc = gl.zeros([R, NB], gl.int32 if TABLE else gl.float32, mma)
                for i0 in range(0, NS, STAGES):
                    phase = (lap0 + i0 // STAGES) & 1
                    for slot in gl.static_range(STAGES):
                        if i0 + slot < NS:
                            mbarrier.wait(ready.index(slot), phase)
                            if TABLE:
                                acc = _stage_sum_table(acc, w_bufs, code_rows, x_bufs, slot, NB, W)
                            else:
                                acc = _stage_sum(acc, w_bufs, code_rows, x_bufs, xs_rows, slot, NB, W, P, BITS, PIPE,
                                                 MAGIC, z_rows)
                            gl.thread_barrier()  # every consumer warp has retired the slot's wgmmas
                            mbarrier.arrive(empty.index(slot))
                lap0 += NS // STAGES
                out = block_logits(acc, sx, r_ptr, row0, N, R, mma, TABLE)
                emit_candidates(out, row0, blk, ck_ptr, ci_ptr, lg_ptr, M, N, NBLK, NB, W, KCAND, WRITE_LOGITS, SUB)
        if LATE:
            gdc_launch_dependents()

    @gluon.jit
    def _ws_producer(w_desc, sz_desc, x_desc, xs_desc, w_bufs, sz_bufs, x_bufs, xs_bufs, ready, empty, NBLK,
                     NS, GRID, STAGES: gl.constexpr, P: gl.constexpr, NB: gl.constexpr, R: gl.constexpr,
                     TABLE: gl.constexpr = True, SUB: gl.constexpr = 1, FULL=0, PARTS: gl.constexpr = 1,
                     z_desc=None, z_bufs=None):
        """Worker partition (1 warp): for each of the program's row blocks (R rows, SUB of the NBLK
        candidate blocks; PARTS > 1: its one block's share of stages, ``_split_range``), the TMA of
        stage i into slot i % STAGES once the consumers released it (free on the first lap: a wait
        on parity 1 of a fresh mbarrier returns at once). No x TMA before ``griddepcontrol.wait``
        (x's tiles are the previous launch's output).

        The weights do not depend on the launch before, so the first block's first STAGES stages
        have their codes and scales (or group codes) issued before the wait -- the ring fills while
        x is prepared -- and their x tiles after it, on the same barriers (0.7-1.7% faster than the
        whole ring after the wait, docs/design-notes.md)."""
        if PARTS > 1:
            blk, s0, s1 = _split_range(gl.program_id(0), FULL, NS, PARTS)
        else:
            blk = gl.program_id(0)
            s0 = 0
            s1 = NS
        E: gl.constexpr = STAGES  # stages issued around the wait
        for e in gl.static_range(E):
            _issue_stage(w_desc, sz_desc, x_desc, xs_desc, w_bufs, sz_bufs, x_bufs, xs_bufs, ready, e, blk * R,
                         STAGES, P, NB, e < s1 - s0, TABLE, s0, z_desc, z_bufs, 1)
        gdc_wait()
        for e in gl.static_range(E):
            _issue_stage(w_desc, sz_desc, x_desc, xs_desc, w_bufs, sz_bufs, x_bufs, xs_bufs, ready, e, blk * R,
                         STAGES, P, NB, e < s1 - s0, TABLE, s0, z_desc, z_bufs, 2)
        if PARTS > 1:
            for i in range(E, s1 - s0):
                mbarrier.wait(empty.index(i % STAGES), ((i // STAGES) & 1) ^ 1)
                _issue_stage(w_desc, sz_desc, x_desc, xs_desc, w_bufs, sz_bufs, x_bufs, xs_bufs, ready, i, blk * R,
                             STAGES, P, NB, True, TABLE, s0, z_desc, z_bufs)
        else:
            c = 0  # stages issued so far
            for blk in range(gl.program_id(0), (NBLK + SUB - 1) // SUB, GRID):
                # the first block's first E stages went out around the wait (at most NS of them)
                i0 = gl.minimum(NS, E) * (c == 0).to(gl.int32)
                c += i0
                for i in range(i0, NS):
                    mbarrier.wait(empty.index(i % STAGES), ((c // STAGES) & 1) ^ 1)
                    _issue_stage(w_desc, sz_desc, x_desc, xs_desc, w_bufs, sz_bufs, x_bufs, xs_bufs, ready, i,
                                 blk * R, STAGES, P, NB, True, TABLE, 0, z_desc, z_bufs)
                    c += 1

    @gluon.jit(do_not_specialize=["M", "N", "NBLK", "NS", "GRID", "FULL"])
    def _coarse_ws_kernel(w_desc, sz_desc, z_desc, x_desc, xs_desc, sx_ptr, r_ptr, ck_ptr, ci_ptr, lg_ptr, M, N, NBLK,
                          NS, GRID, NB: gl.constexpr, P: gl.constexpr, STAGES: gl.constexpr, KCAND: gl.constexpr,
                          WRITE_LOGITS: gl.constexpr, W: gl.constexpr, PRODUCER_REGS: gl.constexpr,
                          TABLE: gl.constexpr = True, BITS: gl.constexpr = 2, SUB: gl.constexpr = 1,
                          LATE: gl.constexpr = False, part_ptr=None, tick_ptr=None, FULL=0, PARTS: gl.constexpr = 1,
                          PIPE: gl.constexpr = False, MAGIC: gl.constexpr = False):
        """``_coarse_wgmma_kernel`` (same arguments plus GRID: the programs launched; SUB candidate
        blocks a program; TABLE: the whole-row variant, else per group with the x sums) as a
        programmatic dependent launch after the x preparation, with its TMA issued by a 1-warp
        producer partition (``ready`` / ``empty`` mbarrier pair per slot): the consumer warps'
        stage loop carries no TMA issue and one partition barrier instead of a CTA barrier per TMA
        (Gluon's single-partition loop has one after each issue). PARTS > 1 (one block a program,
        GRID = FULL + (blocks - FULL) PARTS): the blocks from FULL on split in PARTS shares of
        their stages, the partial sums met in ``part_ptr`` (int32 [(blocks - FULL) PARTS, R, NB])
        under the blocks' tickets ``tick_ptr`` (int32, zero, left zero) -- see ``_ws_consumer``.
        PIPE / MAGIC (per group): see ``_stage_sum``. The first weight stages are issued before the
        PDL wait (``_ws_producer``)."""
        R: gl.constexpr = 16 * W
        w_bufs, sz_bufs, code_rows, x_bufs, xs_bufs, xs_rows, z_bufs, z_rows = _alloc_operands(
            w_desc, sz_desc, x_desc, xs_desc, STAGES, R, NB, P, TABLE, True, z_desc)
        ready, empty, side = ring_barriers(STAGES, 1)  # side: unused
        # (the partitions' tuples are spelled out in the call: a tuple held in a variable loses its
        # constexprs)
        gl.warp_specialize([
            (_ws_consumer, (w_bufs, code_rows, x_bufs, xs_rows, ready, empty, sx_ptr, r_ptr, ck_ptr, ci_ptr,
                            lg_ptr, M, N, NBLK, NS, GRID, NB, P, BITS, STAGES, KCAND, WRITE_LOGITS, W, TABLE, SUB,
                            LATE, part_ptr, tick_ptr, FULL, PARTS, PIPE, z_rows, MAGIC)),
            (_ws_producer, (w_desc, sz_desc, x_desc, xs_desc, w_bufs, sz_bufs, x_bufs, xs_bufs, ready, empty,
                            NBLK, NS, GRID, STAGES, P, NB, R, TABLE, SUB, FULL, PARTS, z_desc, z_bufs)),
        ], [1], [PRODUCER_REGS])
        invalidate_ring_barriers(ready, empty, side, STAGES)


def wgmma_available(device: torch.device) -> bool:
    """Gluon importable and ``device`` a CUDA sm_90 GPU."""
    return (GLUON_ERROR is None and device.type == "cuda"
            and torch.cuda.get_device_capability(device) == (9, 0))


# ---- launch configuration (H200 / offline sm_90 measurements behind each value: docs/draft_head.md)

#: NB up to which the whole-row / per-group pass runs the warp-specialized kernel: above it one
#: block a program spills at the register cap two CTAs an SM need, and NB = 64 spans two blocks
#: (``SPAN``) or, on short heads, takes the single-partition kernel
WS_TABLE_MAX_NB = 32
WS_GROUP_MAX_NB = 32
#: candidate blocks a program per NB: at NB = 64 a program covers two blocks, so each x tile brought
#: into shared memory (16 KB a stage, twice the block's codes) serves twice the rows -- one 20-warp
#: CTA an SM; below it two 8-warp CTAs an SM win
SPAN: dict = {64: 2}
#: ... where the plane has at least this many 64-byte stages: on a short-K head the epilogue, not x,
#: is the cost (49152 x 576 has 3 INT2 stages, 124160 x 5120 has 20)
SPAN_MIN_STAGES = 8
#: ring slots per NB, one block a program: the x tiles grow with NB, so fewer slots keep two CTAs
#: an SM
STAGES: dict = {8: 4, 16: 4, 32: 4, 64: 3}
#: ring slots where a program spans two blocks (one CTA an SM: a deeper ring fits)
STAGES_SPAN: dict = {64: 4}
#: ``maxnreg`` of the single-partition per-group kernel per NB: 128 holds two 8-warp CTAs an SM
#: (the whole-row variant's 111 registers fit uncapped; the cap spills it)
MAXNREG_SINGLE_GROUP: dict = {64: 128}
#: ``maxnreg`` of the warp-specialized kernel per NB, one block a program: two 384-thread CTAs an SM
#: (<= 85 registers). Whole-row: 64 spills with x side by side at NB = 16 and serializes the wgmmas
#: at NB = 32 (C7512); 80 does neither
MAXNREG_WS: dict = {8: 64, 16: 80, 32: 80}
MAXNREG_WS_GROUP: dict = {8: 80, 16: 80, 32: 80}
#: three CTAs an SM (3 x 384 x 56 <= 64K registers) at these NB, on heads of at least
#: ``THREE_CTAS_MIN_STAGES`` stages: faster end to end on 124160 x 5120; on SmolLM2's 49152 x 576
#: the PDL selection launch after the pass then finds no room to place its CTAs early, so short
#: heads keep two
THREE_CTAS_REGS = 56
THREE_CTAS_NB_TABLE: tuple = (8, 16)
THREE_CTAS_NB_GROUP: tuple = (16,)
THREE_CTAS_MIN_STAGES = 8
#: ``maxnreg`` of a spanning warp-specialized launch: 16 consumer warps + a producer warpgroup = 640
#: threads at 96, which Triton's register split turns into 104 for the consumers, 40 for the producer
MAXNREG_WS_SPAN: dict = {64: 96}
#: registers of the producer warp (Gluon pads its partition to a warpgroup); the consumers get the
#: rest of the launch cap's: 24 (setmaxnreg's minimum) leaves them 72 at three CTAs an SM, enough
#: for the INT2 NB = 16 wgmma chain (40 left 64: serialized, C7512)
PRODUCER_REGS = 24
#: the tail of a one-block-a-program whole-row launch split by stages: (parts, unit) -- the
#: ``blocks % (unit x SMs)`` last row blocks run as ``parts`` programs of ``1 / parts`` of the
#: stages each, met through a ticket (``_ws_consumer``), so the work past the last whole round of
#: the SMs is spread over more of them (124160 x 5120 is 970 blocks, 7.35 an SM on 132 SMs). Up to
#: NB = ``SPLIT_TAIL_MAX_NB``; the per-group kernel splits nothing
SPLIT_TAIL = (2, 1)
SPLIT_TAIL_MAX_NB = 16
#: the NB at which the per-group warp-specialized kernel issues all planes' wgmmas of a stage
#: before it waits for the first (``_stage_sum``'s PIPE); at NB = 64 it spills or serializes
WS_PIPE_GROUP: tuple = (8, 16, 32)
#: the NB at which the per-group warp-specialized kernel starts each plane's wgmmas from the zero
#: point and the magic offset (``_retire_plane``'s MAGIC: the int32 -> fp32 conversion off the I2F
#: pipe); faster at NB = 16 / 32, slower below, and it spills at NB = 64
WS_MAGIC_GROUP_NB: tuple = (16, 32)
#: from this NB up the warp-specialized kernel lets the next PDL launch (the selection) place its
#: CTAs only when a program's blocks are done (``_ws_consumer`` LATE), below it at the program's start
LATE_TRIGGER_MIN_NB = 16


@dataclass(frozen=True)
class WgmmaConfig:
    """How :func:`coarse_wgmma` launches the pass for one call (:func:`launch_config`)."""

    kernel: str  # "ws": _coarse_ws_kernel, "single": _coarse_wgmma_kernel
    table: bool  # the whole-row variant (else per group)
    nb: int  # rows of x padded for the wgmma's N: M rounded up to a power of two, at least 8
    span: int  # candidate blocks a program (1 or 2)
    rows: int  # tokens a program (block x span)
    programs: int  # row blocks (before a split tail adds programs)
    stages: int  # ring slots
    maxnreg: int | None  # the launch's register cap (None: the compiler's choice)
    num_warps: int
    split: tuple[int, int] | None  # (parts, unit) of the split tail (SPLIT_TAIL), None: no split
    pipe: bool  # per group: all planes' wgmmas of a stage in flight (WS_PIPE_GROUP)
    magic: bool  # per group: wgmmas started from the magic tile (WS_MAGIC_GROUP_NB)
    late: bool  # the dependents' trigger after the program's blocks (LATE_TRIGGER_MIN_NB)
    pdl: bool  # a programmatic dependent launch after the x preparation (the ws kernel)


def launch_config(bits: int, m: int, n: int, ell: int, block: int) -> WgmmaConfig:
    """The launch :func:`coarse_wgmma` makes for ``m`` rows of x against an INT``bits`` head of
    ``n`` rows whose plane-split rows are ``ell`` bytes (64-byte stages), ``block`` tokens a
    candidate block (INT2: the whole-row variant, ``TABLE_BITS``; INT4 per group). Pure: reads only
    this module's tables."""
    table = bits in TABLE_BITS
    nb = max(8, triton.next_power_of_2(m))
    ns = ell // STAGE_BYTES
    span = SPAN.get(nb, 1) if ns >= SPAN_MIN_STAGES else 1
    ws = span == 2 or nb <= (WS_TABLE_MAX_NB if table else WS_GROUP_MAX_NB)
    rows = block * span
    if not ws:  # NB = 64 on a head too short to span two blocks
        return WgmmaConfig(kernel="single", table=table, nb=nb, span=1, rows=rows, programs=-(-n // rows),
                           stages=STAGES[nb], maxnreg=None if table else MAXNREG_SINGLE_GROUP.get(nb),
                           num_warps=rows // 16, split=None, pipe=False, magic=False, late=False, pdl=False)
    if span == 2:
        stages, cap = STAGES_SPAN[nb], MAXNREG_WS_SPAN[nb]
    elif ns >= THREE_CTAS_MIN_STAGES and nb in (THREE_CTAS_NB_TABLE if table else THREE_CTAS_NB_GROUP):
        stages, cap = STAGES[nb], THREE_CTAS_REGS
    else:
        stages, cap = STAGES[nb], (MAXNREG_WS if table else MAXNREG_WS_GROUP)[nb]
    return WgmmaConfig(kernel="ws", table=table, nb=nb, span=span, rows=rows, programs=-(-n // rows), stages=stages,
                       maxnreg=cap, num_warps=rows // 16,
                       split=SPLIT_TAIL if span == 1 and table and nb <= SPLIT_TAIL_MAX_NB else None,
                       pipe=not table and nb in WS_PIPE_GROUP, magic=not table and nb in WS_MAGIC_GROUP_NB,
                       late=nb >= LATE_TRIGGER_MIN_NB, pdl=True)


_TICKETS: dict = {}  # device -> zeroed int32 tickets of the split blocks (every launch leaves them zero)
_PARTS: dict = {}  # device -> int32 scratch of the split blocks' partial sums (written before it is read)


def _split_launch(nprog: int, ns: int, rows: int, nb: int, device: torch.device, split: tuple[int, int]):
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
    return nprog - left, parts, part, tick


@functools.cache
def _codes_smem_layout(rows: int):
    """Shared layout of a stage's codes box [rows, 64] (uint8)."""
    return gl.NVMMASharedLayout.get_default_for([rows, 64], gl.uint8)


@functools.cache
def _wide_layout(p: int):
    """Shared layout of a side-by-side x box [NB, 32 P] (int8, rows of 32 P bytes swizzled)."""
    return gl.NVMMASharedLayout(swizzle_byte_width=32 * p, element_bitwidth=8, rank=2)


@functools.cache
def _plain_layout(bitwidth: int):
    """Unswizzled shared layout of a 2-D TMA box of ``bitwidth``-bit elements (read as rows)."""
    return gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=bitwidth, rank=2)


def _zero_box(rows: int) -> list[int]:
    """The TMA box of a stage's zero bytes for ``rows`` token rows: 128 bytes, so every ring slot it
    lands in stays 128-byte aligned as TMA needs (at 64 rows it takes the next stage's zeros too,
    unread)."""
    return [max(1, 128 // rows), rows]


def coarse_wgmma(x: torch.Tensor, packed: torch.Tensor, sz: torch.Tensor, *, n: int, bits: int, block: int,
                 kcand: int, write_logits: bool, table_r: torch.Tensor | None = None):
    """Launch the int8-wgmma coarse pass (fast mode) as :func:`launch_config` says. ``x`` [M, K]
    (M <= 64, unit stride along K), ``packed`` the INTx plane-split codes uint8 [N, L] (contiguous,
    L % 64 == 0), ``sz`` from ``wgmma_pack.wgmma_sz`` -- or, with ``table_r`` (fp32 [N]), the
    whole-row variant's words and units from ``wgmma_pack.wgmma_table``. ``block`` tokens a
    candidate block (64 or 128). Returns the six ``CoarseOut`` tensors (certified ones empty;
    logits only if ``write_logits``); nothing is mutated (the split tail's tickets are left zero)."""
    from lowbit.ops.coarse_head.epilogue import coarse_outputs
    from lowbit.ops.coarse_head.x_int8 import x_int8_tiles

    if GLUON_ERROR is not None:
        raise RuntimeError(f"coarse_wgmma needs triton.experimental.gluon: {GLUON_ERROR}")
    m, k = x.shape
    ell = packed.shape[1]
    p = 8 // bits
    if bits not in WGMMA_BITS or not 1 <= m <= WGMMA_MAX_M or block not in (64, 128) or ell % STAGE_BYTES:
        raise ValueError(f"coarse_wgmma serves bits in {WGMMA_BITS}, 1 <= M <= {WGMMA_MAX_M}, block 64 / 128 and "
                         f"plane lengths % 64 == 0; got bits={bits}, x {tuple(x.shape)}, block={block}, L={ell}")
    if k > p * ell or not packed.is_contiguous() or not sz.is_contiguous():
        raise ValueError(f"coarse_wgmma: K = {k} exceeds the {p} x {ell} packed codes or operands are not contiguous")
    table = table_r is not None
    if table != (bits in TABLE_BITS):
        raise ValueError(f"coarse_wgmma's whole-row variant serves bits in {TABLE_BITS} and only those (table_r "
                         f"given); got bits={bits}, table_r {'given' if table else 'None'}")
    if table and (bits not in TABLE_BITS or p * ell > TABLE_MAX_K or table_r.shape != (n,)
                  or table_r.dtype != torch.float32):
        raise ValueError(f"coarse_wgmma's whole-row variant serves bits in {TABLE_BITS}, padded K <= {TABLE_MAX_K} "
                         f"and row units fp32 [{n}]; got bits={bits}, padded K {p * ell}, units "
                         f"{tuple(table_r.shape)} {table_r.dtype}")
    if table and (sz.dtype != torch.int32 or sz.shape != (2 * (ell // STAGE_BYTES), -(-n // 4) * 4)):
        raise ValueError(f"coarse_wgmma's whole-row variant takes wgmma_table's int32 words "
                         f"[{2 * (ell // STAGE_BYTES)}, {-(-n // 4) * 4}], got {sz.dtype} {tuple(sz.shape)}")
    sz_bytes = wgmma_sz_bytes(n, bits, ell)
    if not table and (sz.dtype != torch.uint8 or sz.shape != (sz_bytes,)):
        raise ValueError(f"coarse_wgmma takes wgmma_sz's uint8 buffer of scales and zeros [{sz_bytes}], "
                         f"got {sz.dtype} {tuple(sz.shape)}")
    if x.stride(1) != 1:
        x = x.contiguous()
    cfg = launch_config(bits, m, n, ell, block)
    nb, rows, nprog = cfg.nb, cfg.rows, cfg.programs
    ns = ell // STAGE_BYTES
    nblk = -(-n // block)  # candidate blocks
    # the whole-row decode's K order; the trigger lets the PDL launch of the warp-specialized kernel
    # place its CTAs while x is prepared
    xq, xs, sx = x_int8_tiles(x, ell, p, nb, perm=table, trigger=cfg.pdl)
    cand_key, cand_lb, cand_idx, block_lb, block_rest, logits = coarse_outputs(m, n, nblk, kcand, False,
                                                                               write_logits, x.device)
    w_desc = TensorDescriptor.from_tensor(packed, [rows, 64], _codes_smem_layout(rows))
    if table:  # the group codes; no zero bytes (the codes' descriptor stands in, unread)
        sz_desc = z_desc = TensorDescriptor.from_tensor(sz, [2, rows], _plain_layout(32))
    else:  # the P planes' fp16 scales and the byte of their zeros, a box each per stage
        scales, zeros = wgmma_sz_views(sz, bits, ell)
        sz_desc = TensorDescriptor.from_tensor(scales, [p, rows], _plain_layout(16))
        z_desc = TensorDescriptor.from_tensor(zeros, _zero_box(rows), _plain_layout(8))
    x_desc = TensorDescriptor.from_tensor(xq, [nb, 32 * p], _wide_layout(p))
    xs_desc = TensorDescriptor.from_tensor(xs, [4, nb], _plain_layout(32))
    reg = {"maxnreg": cfg.maxnreg} if cfg.maxnreg else {}
    args = (w_desc, sz_desc, z_desc, x_desc, xs_desc, sx, table_r if table else sx, cand_key, cand_idx,
            logits if write_logits else cand_key, m, n, nblk, ns)
    if cfg.kernel == "single":
        _coarse_wgmma_kernel[(nprog,)](*args, NB=nb, P=p, BITS=bits, STAGES=cfg.stages, KCAND=kcand,
                                      WRITE_LOGITS=write_logits, W=rows // 16, TABLE=table, num_warps=cfg.num_warps,
                                      **reg)
        return cand_key, cand_lb, cand_idx, block_lb, block_rest, logits
    full, parts, part, tick = nprog, 1, None, None
    if cfg.split is not None:
        full, parts, part, tick = _split_launch(nprog, ns, rows, nb, x.device, cfg.split)
    if parts == 1:
        part = tick = sx  # unread
    grid = full + (nprog - full) * parts
    _coarse_ws_kernel[(grid,)](*args, grid, NB=nb, P=p, STAGES=cfg.stages, KCAND=kcand, WRITE_LOGITS=write_logits,
                               W=rows // 16, PRODUCER_REGS=PRODUCER_REGS, TABLE=table, BITS=bits, SUB=cfg.span,
                               LATE=cfg.late, part_ptr=part, tick_ptr=tick, FULL=full, PARTS=parts, PIPE=cfg.pipe,
                               MAGIC=cfg.magic, num_warps=cfg.num_warps, launch_pdl=True, **reg)
    return cand_key, cand_lb, cand_idx, block_lb, block_rest, logits
