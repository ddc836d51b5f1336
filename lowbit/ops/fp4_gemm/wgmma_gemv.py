"""The FP4 wgmma GEMV of ``fp4_gemm`` on sm_90 (Gluon), weights decoded in registers:
``C[M, N] bf16 = A[M, K] e4m3 (1x128 scales) @ dequant(B[N, K/2] E2M1, UE8M0 1x32)^T`` for M <= 32
(the dispatch also runs it over 32-row chunks of a larger M).

Why: the ``mma.sync`` GEMV (``lowbit/ops/fp8_gemm/mma_gemv.py``) spends most of its issue slots
per 16 x 128 weight tile on work that is not the weight stream itself: at M = 16 every row tile
re-loads and re-converts the activations (their B fragments: 8 loads, 32 F2FP and 16 PRMT a
tile), and sm_90's fp16 ``HMMA`` needs every operand converted. Here:

* the weight tiles arrive by **TMA** (no LSU instructions, no registers while in flight) through
  a ring of ``STAGES`` 512-wide K stages; when a CTA's stages fit the ring, all its loads are
  issued before the first wait;
* each warp reads its A fragments with one ``ldmatrix`` (``LDSM.16.M88.2``) per 32-wide group --
  rows g and g + 8 of the warp's 16-row slab, the 4 bytes ``16 s + 4 t`` of group s: exactly the
  words the register A operand of ``wgmma.m64nNk32.e4m3`` holds (``DotOperandLayout(0, k_width=4)``)
  -- and decodes them to E4M3 by shifts and masks (an E2M1 code ``s e1 e0 m`` is the E4M3 byte
  ``s 0 0 e1 e0 m 0 0``, its value times 2^-6; about 3.5 integer ops an output word, no PRMT);
* the activations are the wgmma's **B operand in shared memory**, staged once per CTA for its
  whole K range (with their scales) and shared by all its rows: no per-row-tile loads or
  conversions.

K order: the low nibbles of a word become the wgmma's k ``4t..4t+3`` and the high nibbles k
``16 + 4t..``, so inside every 32-wide group the wgmma's k = 16 h + 4 t + i carries the weight's
k = 8 t + 2 i + h. The activations are stored in the same order: each group's 32 bytes as its 16
even-indexed bytes, then its 16 odd ones (two ``prmt`` per 8 bytes while staging).

Scales: one wgmma per group (K = 32 = one UE8M0 group) from a zero accumulator; the block's sum
is ``sum_s 2^(e_s - 127) d_s`` (per weight row = per accumulator row), then times the activation
scale of its column (two-level accumulation as in ``mma_gemv``). A 255 scale byte makes the
whole output row NaN (the reference's rule).

Parallelism: a CTA is W = 4 or 8 warps (one or two warpgroups) and 16 W weight rows; ``SPLIT``
CTAs split the K stages of a row tile so that small N still fills the GPU. With SPLIT > 1 the
partials meet in one launch, deterministically (split order): the last CTA of a row tile to
arrive at an ``acq_rel`` counter adds them all. The counters are reset by the reducing CTA for the
next launch or graph replay. Every launch is a programmatic dependent launch (the CTAs are placed
while the previous kernel of the stream drains; ``lowbit/ops/_gluon_pdl.py``). Measured against
``mma_gemv`` and row-wise ``_scaled_mm``: docs/gemm.md.

Gluon does not run under ``TRITON_INTERPRET``: this kernel is tested on the GPU tier
(tests/ops/test_fp4_wgmma_gemv.py) and compiled for sm_90 without a GPU by ``tests/sm90``.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import torch
import triton

from lowbit._backend import sm_count
from lowbit.ops._arrival_counters import arrival_counters

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
    from lowbit.ops._gluon_wgmma import (
        acc_layout,
        e8m0_decode,
        four,
        row_words_layout,
        split_k_epilogue,
        warp_rows,
    )

    GLUON_ERROR = None
except Exception as e:  # noqa: BLE001 - any failure means "no Gluon path"
    GLUON_ERROR = e

__all__ = ["GLUON_ERROR", "MAX_M", "STAGE_K", "WgmmaGemvConfig", "fp4_wgmma_gemv", "pick_config", "wgmma_n"]

#: most activation rows one launch serves (the wgmma's N, :func:`wgmma_n`: 8 up to M = 8, 16 up
#: to 16, 32 up to 32). N = 64 would hold 64 staged activation words a stage per thread in
#: registers (253-255 registers, spills).
MAX_M = 32
STAGE_K = 512  # K per pipeline stage: four 128-wide blocks (two [64, 128 B] weight boxes, one [64, 16 B] scale box)
#: what the result is multiplied by: the decoded weights are E2M1 x 2^-6
_RESULT_SCALE = 64.0

if GLUON_ERROR is None:
    # E2M1 nibbles -> E4M3 bytes (x 2^-6): low nibbles (k even) and high nibbles (k odd) of a word
    _DEC_LO = gl.constexpr("{.reg .b32 a, b; shl.b32 a, $1, 2; and.b32 a, a, 0x1C1C1C1C; shl.b32 b, $1, 4; "
                           "and.b32 b, b, 0x80808080; or.b32 $0, a, b;}")
    _DEC_HI = gl.constexpr("{.reg .b32 a; shr.u32 a, $1, 2; and.b32 a, a, 0x1C1C1C1C; and.b32 $0, $1, 0x80808080; "
                           "or.b32 $0, $0, a;}")
    # 8 activation bytes -> (bytes 0, 2, 4, 6), (bytes 1, 3, 5, 7)
    _EVEN_ODD = gl.constexpr("{prmt.b32 $0, $2, $3, 0x6420; prmt.b32 $1, $2, $3, 0x7531;}")
    _EXP_BITS = gl.constexpr(0x7F800000)
    _F32_2M127 = gl.constexpr(0x00400000)  # 2^-127, the subnormal UE8M0 byte 0 stands for
    _SIGN = gl.constexpr(-0x7F7F7F80)  # 0x80808080 as int32
    _RESULT = gl.constexpr(_RESULT_SCALE)

    @gluon.constexpr_function
    def _codes_layout(W):
        """uint8 [16 W, 16] (row, byte of a group): lane (g, t) of warp w holds bytes 4t..4t+3 of
        rows 16w + g and 16w + g + 8 -- the fragment words ``ldmatrix`` hands out."""
        return gl.DistributedLinearLayout(reg_bases=[[0, 1], [0, 2], [8, 0]],
                                          lane_bases=[[0, 4], [0, 8], [1, 0], [2, 0], [4, 0]],
                                          warp_bases=warp_rows(W), block_bases=[], shape=[16 * W, 16])

    @gluon.constexpr_function
    def _x_layout(W):
        """int32 [NB, 16, 8] (activation row, group of a stage, word): one lane a group row."""
        return gl.BlockedLayout([1, 1, 8], [2, 16, 1], [W, 1, 1], [2, 1, 0])

    @gluon.jit
    def _scale_of(v, SHIFT: gl.constexpr):
        """Byte SHIFT/8 of the UE8M0 words ``v`` as fp32 2^(e - 127) (byte 0 -> 2^-127, 255 -> inf;
        the 255 rows are made NaN at the end)."""
        if SHIFT >= 0:
            e = (v << SHIFT) & _EXP_BITS
        else:
            e = (v >> (-SHIFT)) & _EXP_BITS
        return gl.maximum(e, _F32_2M127).to(gl.float32, bitcast=True)

    @gluon.jit
    def _load_x(a_ptr, M, K: gl.constexpr, j0, i: gl.constexpr, NB: gl.constexpr, W: gl.constexpr):
        """Stage j0 + i's activation words int32 [NB, 16 groups, 8] (rows >= M and columns >= K: 0)."""
        xl: gl.constexpr = _x_layout(W)
        r = gl.arange(0, NB, layout=gl.SliceLayout(1, gl.SliceLayout(2, xl)))
        g = gl.arange(0, 16, layout=gl.SliceLayout(0, gl.SliceLayout(2, xl)))
        c = gl.arange(0, 8, layout=gl.SliceLayout(0, gl.SliceLayout(1, xl)))
        r3 = gl.expand_dims(gl.expand_dims(r, 1), 2)
        col = (j0 + i) * 128 + gl.expand_dims(gl.expand_dims(g, 0), 2) * 8 + gl.expand_dims(gl.expand_dims(c, 0), 1)
        return gl.load(a_ptr + r3 * (K // 4) + col, mask=(r3 < M) & (col < K // 4), other=0)

    @gluon.jit
    def _store_x(x_words, raw, i: gl.constexpr, NB: gl.constexpr):
        """Store stage i's words ``raw`` (from :func:`_load_x`) into x buffer i permuted to wgmma k
        order (per group: the even bytes, then the odd ones), as the stage's 16 [NB, 32] B tiles
        (an int32 view)."""
        lo, hi = gl.split(gl.reshape(raw, [NB, 16, 4, 2]))  # the 4 byte-octets of a group as word pairs
        ev, od = gl.inline_asm_elementwise(_EVEN_ODD, "=r,=r,r,r", [lo, hi], dtype=(gl.int32, gl.int32),
                                           is_pure=True, pack=1)
        p = gl.reshape(gl.permute(gl.join(ev, od), (0, 1, 3, 2)), [NB, 16, 8])  # [ev0..ev3, od0..od3]
        x_words.index(i).store(gl.permute(p, (1, 0, 2)))

    @gluon.jit
    def _load_act_scales(as_ptr, M, KB: gl.constexpr, j0, i: gl.constexpr, NB: gl.constexpr, W: gl.constexpr,
                         AS_E8M0: gl.constexpr):
        """The activation scales of stage j0 + i's 4 K blocks, fp32 [4, NB] (rows >= M and blocks
        past K: 0)."""
        sl: gl.constexpr = gl.BlockedLayout([1, 1], [2, 16], [W, 1], [1, 0])
        b = gl.expand_dims(gl.arange(0, 4, layout=gl.SliceLayout(1, sl)), 1)
        r = gl.expand_dims(gl.arange(0, NB, layout=gl.SliceLayout(0, sl)), 0)
        kb = (j0 + i) * 4 + b
        m = (r < M) & (kb < KB)
        if AS_E8M0:
            e = gl.load(as_ptr + r * KB + kb, mask=m, other=0).to(gl.int32)
            s = gl.where(m, e8m0_decode(e), 0.0)
        else:
            s = gl.load(as_ptr + r * KB + kb, mask=m, other=0.0)
        return s

    @gluon.jit
    def _issue_stage(w_desc, s_desc, w_bufs, s_bufs, bars, j, j0, row0, STAGES: gl.constexpr, pred):
        """TMA of this CTA's stage j (global stage j0 + j) into ring slot j % STAGES."""
        slot = j % STAGES
        bar = bars.index(slot)
        mbarrier.expect(bar, 2 * w_desc.block_type.nbytes + s_desc.block_type.nbytes, pred=pred)
        col = (j0 + j) * 256  # packed bytes of the stage's first code
        tma.async_copy_global_to_shared(w_desc, [row0, col], bar, w_bufs.index(2 * slot), pred)
        tma.async_copy_global_to_shared(w_desc, [row0, col + 128], bar, w_bufs.index(2 * slot + 1), pred)
        tma.async_copy_global_to_shared(s_desc, [row0, (j0 + j) * 16], bar, s_bufs.index(slot), pred)

    @gluon.jit
    def _load_codes(w_bufs, slot, b: gl.constexpr, W: gl.constexpr):
        """Block b's A fragment words of the stage in ``slot``: one ``ldmatrix`` per 32-wide group."""
        wb = w_bufs.index(2 * slot + b // 2)
        q = ()
        for s in gl.static_range(4):
            q = q + (wb.slice(64 * (b % 2) + 16 * s, 16, dim=1).load(_codes_layout(W)),)
        return q

    @gluon.jit
    def _issue_codes(q, x_bufs, j, b: gl.constexpr, zero, a_l: gl.constexpr, R: gl.constexpr):
        """Decode block b's words ``q`` (from :func:`_load_codes`) and start its 4 group wgmmas
        (in-flight tokens)."""
        d = ()
        for s in gl.static_range(4):
            lo = gl.inline_asm_elementwise(_DEC_LO, "=r,r", [q[s]], dtype=gl.float8e4nv, is_pure=True, pack=4)
            hi = gl.inline_asm_elementwise(_DEC_HI, "=r,r", [q[s]], dtype=gl.float8e4nv, is_pure=True, pack=4)
            a = gl.reshape(gl.permute(gl.join(lo, hi), (0, 2, 1)), [R, 32])
            a = gl.convert_layout(a, a_l, assert_trivial=True)
            d = d + (warpgroup_mma(a, x_bufs.index(16 * j + 4 * b + s).permute((1, 0)), zero, use_acc=False,
                                   is_async=True),)
        return d

    @gluon.jit
    def _retire_block(acc, flags, d, v, sa, row_l: gl.constexpr, col_l: gl.constexpr):
        """acc += (sum_s 2^(e_s - 127) d_s) * sa for one block (``v``: the rows' UE8M0 words)."""
        v = gl.convert_layout(v, row_l, assert_trivial=True)
        blk = d[0] * gl.expand_dims(_scale_of(v, 23), 1)
        blk = blk + d[1] * gl.expand_dims(_scale_of(v, 15), 1)
        blk = blk + d[2] * gl.expand_dims(_scale_of(v, 7), 1)
        blk = blk + d[3] * gl.expand_dims(_scale_of(v, -1), 1)
        acc = acc + blk * gl.expand_dims(sa, 0)
        flags = flags | ((~v - 0x01010101) & v & _SIGN)  # bit 8i + 7 set where scale byte i is 255
        return acc, flags

    @gluon.jit
    def _stage_sum(acc, flags, w_bufs, s_bufs, x_bufs, as_smem, slot, j, NB: gl.constexpr, W: gl.constexpr):
        """acc += the 4 K blocks of the CTA's stage j (weights in ring slot ``slot``). Every
        ``ldmatrix`` of a block is issued before its first decode, and the next block's before this
        block's wgmmas are waited for: the shared-memory latency leaves the decode chain."""
        R: gl.constexpr = 16 * W
        mma: gl.constexpr = acc_layout(NB, W)
        a_l: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=4)
        row_l: gl.constexpr = gl.SliceLayout(1, mma)
        col_l: gl.constexpr = gl.SliceLayout(0, mma)
        sw = s_bufs.index(slot)._reinterpret(gl.int32, [R, 4], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
        v_blocks = four(sw.load(row_words_layout(W)))
        zero = gl.zeros([R, NB], gl.float32, mma)
        q = _load_codes(w_bufs, slot, 0, W)
        for b in gl.static_range(4):
            d = _issue_codes(q, x_bufs, j, b, zero, a_l, R)
            if b < 3:
                q = _load_codes(w_bufs, slot, b + 1, W)
            d = warpgroup_mma_wait(num_outstanding=0, deps=d)
            acc, flags = _retire_block(acc, flags, d, v_blocks[b], as_smem.index(4 * j + b).load(col_l), row_l, col_l)
        return acc, flags

    @gluon.jit
    def _issue_prologue(w_desc, s_desc, w_bufs, s_bufs, bars, j0, row0, n_my, PER_SPLIT: gl.constexpr,
                        STAGES: gl.constexpr):
        """The weight TMAs issued before the K loop: all the CTA's stages when they fit the ring,
        else STAGES - 1 (the last slot is filled at the top of the loop: filling the whole ring
        before the activations are staged measured 5-15% slower, docs/gemm.md)."""
        if PER_SPLIT <= STAGES:
            for j in gl.static_range(PER_SPLIT):
                _issue_stage(w_desc, s_desc, w_bufs, s_bufs, bars, j, j0, row0, STAGES, j < n_my)
        else:
            for j in gl.static_range(STAGES - 1):
                _issue_stage(w_desc, s_desc, w_bufs, s_bufs, bars, j, j0, row0, STAGES, j < n_my)

    @gluon.jit
    def _load_acts(a_ptr, as_ptr, M, K: gl.constexpr, KB: gl.constexpr, j0, PER_SPLIT: gl.constexpr,
                   NB: gl.constexpr, W: gl.constexpr, AS_E8M0: gl.constexpr):
        """Every activation word and scale of the CTA's PER_SPLIT stages, loaded into registers
        (tuples of per-stage tensors; nothing waits for them here)."""
        raw_x = ()
        raw_s = ()
        for i in gl.static_range(PER_SPLIT):
            raw_x = raw_x + (_load_x(a_ptr, M, K, j0, i, NB, W),)
        for i in gl.static_range(PER_SPLIT):
            raw_s = raw_s + (_load_act_scales(as_ptr, M, KB, j0, i, NB, W, AS_E8M0),)
        return raw_x, raw_s

    @gluon.jit(do_not_specialize=["M", "n_stages"])
    def _fp4_wgmma_gemv_kernel(w_desc, s_desc, a_ptr, as_ptr, c_ptr, ws_ptr, cnt_ptr, M, N, n_stages,
                               K: gl.constexpr, NB: gl.constexpr, PER_SPLIT: gl.constexpr, STAGES: gl.constexpr,
                               SPLIT: gl.constexpr, AS_E8M0: gl.constexpr, W: gl.constexpr,
                               X_FIRST: gl.constexpr = False, TRIGGER: gl.constexpr = False):
        """Program (row tile, split): weight rows R p .. R p + R - 1 (R = 16 W), stages [split *
        PER_SPLIT, min(+ PER_SPLIT, n_stages)). ``w_desc``: TMA descriptor of the packed weight
        uint8 [N, K/2], box [R, 128]; ``s_desc``: of its UE8M0 scales uint8 [N, K/32], box [R, 16];
        ``a_ptr``: e4m3 activations as int32 words [M, K/4]; ``as_ptr``: [M, K/128] fp32 (or UE8M0
        bytes); ``c_ptr``: bf16 [M, N]; ``ws_ptr``: fp32 [SPLIT, NB, N] partials and ``cnt_ptr``:
        int32 [N / R] arrival counters (zero between launches; SPLIT > 1 only).

        The CTA's activations (and their scales) are staged in shared memory once, up front, for
        all its stages; the weight stages stream through a TMA ring of STAGES slots (no refills
        when PER_SPLIT <= STAGES: every load is issued before the first wait).

        Launched with ``launch_pdl=True``: nothing global is read or written before
        ``griddepcontrol.wait`` (lowbit/ops/_gluon_pdl.py); TRIGGER lets the next PDL kernel place
        its CTAs from then on."""
        R: gl.constexpr = 16 * W
        KB: gl.constexpr = K // 128
        mma: gl.constexpr = acc_layout(NB, W)
        row_l: gl.constexpr = gl.SliceLayout(1, mma)
        col_l: gl.constexpr = gl.SliceLayout(0, mma)
        x_sl: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=32, element_bitwidth=8, rank=3)
        x_sl2: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=32, element_bitwidth=8, rank=2)
        x_sl32: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=32, element_bitwidth=32, rank=3)

        pid_n = gl.program_id(0)
        pid_k = gl.program_id(1)
        row0 = pid_n * R
        j0 = pid_k * PER_SPLIT
        n_my = gl.minimum(PER_SPLIT, n_stages - j0)
        gdc_wait()
        if TRIGGER:
            gdc_launch_dependents()

        w_bufs = gl.allocate_shared_memory(gl.uint8, [2 * STAGES, R, 128], w_desc.layout)
        s_bufs = gl.allocate_shared_memory(gl.uint8, [STAGES, R, 16], s_desc.layout)
        # the CTA's activations as PER_SPLIT x 16 [NB, 32] B tiles: stored a stage at a time
        # ([16, NB, 8] int32 views of rank 3), read a tile at a time (rank-2 views, same bytes)
        x_store = gl.allocate_shared_memory(gl.float8e4nv, [PER_SPLIT, 16, NB, 32], x_sl)
        x_bufs = x_store._reinterpret(gl.float8e4nv, [16 * PER_SPLIT, NB, 32], x_sl2)
        x_words = x_store._reinterpret(gl.int32, [PER_SPLIT, 16, NB, 8], x_sl32)
        as_smem = gl.allocate_shared_memory(gl.float32, [4 * PER_SPLIT, NB], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
        as_rows = as_smem._reinterpret(gl.float32, [4 * PER_SPLIT, NB], gl.SwizzledSharedLayout(1, 1, 1, [0]))
        bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(STAGES):
            mbarrier.init(bars.index(i), count=1)
        fence_async_shared()  # barrier inits visible to the TMA unit before the first copy

        # Every activation load of the CTA is issued before the first is used (staged a stage at a
        # time, the CTA paid one global round trip per stage: docs/gemm.md). X_FIRST: those loads
        # go out before the weight TMAs (Gluon puts a CTA barrier after each TMA issue of the
        # prologue, which the loads would otherwise queue behind).
        if X_FIRST:
            raw_x, raw_s = _load_acts(a_ptr, as_ptr, M, K, KB, j0, PER_SPLIT, NB, W, AS_E8M0)
            _issue_prologue(w_desc, s_desc, w_bufs, s_bufs, bars, j0, row0, n_my, PER_SPLIT, STAGES)
        else:
            _issue_prologue(w_desc, s_desc, w_bufs, s_bufs, bars, j0, row0, n_my, PER_SPLIT, STAGES)
            raw_x, raw_s = _load_acts(a_ptr, as_ptr, M, K, KB, j0, PER_SPLIT, NB, W, AS_E8M0)
        for i in gl.static_range(PER_SPLIT):
            _store_x(x_words, raw_x[i], i, NB)
            as_smem.slice(4 * i, 4, dim=0).store(raw_s[i])
        fence_async_shared()  # the generic-proxy stores -> visible to the wgmmas (async proxy)
        gl.thread_barrier()

        acc = gl.zeros([R, NB], gl.float32, mma)
        flags = gl.zeros([R], gl.int32, row_l)
        for j in range(0, n_my):
            if PER_SPLIT > STAGES:
                # slot (j - 1) % STAGES was read by stage j - 1: once every warp is past it, refill
                gl.thread_barrier()
                _issue_stage(w_desc, s_desc, w_bufs, s_bufs, bars, j + STAGES - 1, j0, row0, STAGES,
                             j + STAGES - 1 < n_my)
            slot = j % STAGES
            mbarrier.wait(bars.index(slot), (j // STAGES) & 1)
            acc, flags = _stage_sum(acc, flags, w_bufs, s_bufs, x_bufs, as_rows, slot, j, NB, W)
        for i in gl.static_range(STAGES):
            mbarrier.invalidate(bars.index(i))

        out = acc * _RESULT
        out = gl.where(gl.expand_dims(flags != 0, 1), float("nan"), out)
        rows = row0 + gl.expand_dims(gl.arange(0, R, layout=row_l), 1)  # weight row n
        cols = gl.expand_dims(gl.arange(0, NB, layout=col_l), 0)  # activation row m
        ok = (rows < N) & (cols < M)
        split_k_epilogue(out, c_ptr, ws_ptr, cnt_ptr, pid_n, pid_k, rows, cols, ok, N, NB, SPLIT)


class WgmmaGemvConfig(NamedTuple):
    """Launch configuration of :func:`fp4_wgmma_gemv`: a ring of ``stages`` 512-wide K stages,
    ``split`` CTAs a row tile along K, ``warps`` (4 or 8) warps a CTA, 16 ``warps`` weight rows a
    CTA; ``x_first``: the activation loads issued before the weight TMAs; ``trigger``: let the next
    PDL kernel place its CTAs as soon as every CTA of this one has begun."""

    stages: int
    split: int
    warps: int = 4
    x_first: bool = False
    trigger: bool = False


def pick_config(n: int, k: int, m: int = 1, sms: int = 132) -> WgmmaGemvConfig:
    """The launch configuration from same-run sweeps on the H200 (the benchmark's five (N, K),
    layer-stack timer, within 4% of the best config swept on all ten decode cases; docs/gemm.md):

    * A ring of two 512-wide stages, four stages a CTA (SPLIT = K / 2048): the activations of a
      CTA are staged in one round trip, so fewer, longer CTAs win.
    * M <= 8 and fewer than 64 row tiles (N2112): two stages a CTA, so that the split fills the
      GPU.
    * 8 warps (128 rows a CTA) at M > 8 when K is split and the grid still has >= 100 CTAs of
      128 rows, else 4.
    * ``x_first`` at M > 8, where the CTA's activation loads are many (at M = 1 it was slower).
    * ``trigger`` where the grid has at most one CTA an SM: faster on every such grid, up to 20%
      slower on some grids of two or three (the next grid's CTAs then land unevenly)."""
    n_st = -(-k // STAGE_K)
    per = 2 if m <= 8 and -(-n // 64) < 64 else 4
    split = -(-n_st // per)
    warps = 8 if m > 8 and split > 1 and -(-n // 128) * split >= 100 else 4
    per_split = triton.next_power_of_2(-(-n_st // split))
    tiles = -(-n // (16 * warps))
    return WgmmaGemvConfig(2, split, warps, m > 8, tiles * -(-n_st // per_split) <= sms)


def wgmma_n(m: int) -> int:
    """The wgmma's N (the activation rows a launch computes, padded): 8, 16 or 32."""
    return 8 if m <= 8 else 16 if m <= 16 else 32


def fp4_wgmma_gemv(a: torch.Tensor, a_s: torch.Tensor, b: torch.Tensor, b_s: torch.Tensor,
                   config: WgmmaGemvConfig | tuple | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """a e4m3 [M, K] (1 <= M <= MAX_M, K % 512 == 0, contiguous), a_s [M, K/128] fp32 or
    float8_e8m0fnu (contiguous); b packed E2M1 uint8 [N, K/2] with UE8M0 uint8 b_s [N, K/32],
    contiguous. Returns bf16 [M, N] (``out`` if given). ``config``: a :class:`WgmmaGemvConfig` or
    its fields as a tuple (default :func:`pick_config`). Launches with SPLIT > 1 use the current
    stream's arrival counters (:mod:`lowbit.ops._arrival_counters`): two streams may run them at once."""
    if GLUON_ERROR is not None:
        raise RuntimeError(f"fp4_wgmma_gemv needs triton.experimental.gluon: {GLUON_ERROR}")
    m, k = a.shape
    n = b.shape[0]
    if not 1 <= m <= MAX_M or k % STAGE_K:
        raise ValueError(f"fp4_wgmma_gemv serves 1 <= M <= {MAX_M} and K % {STAGE_K} == 0, "
                         f"got a of shape {tuple(a.shape)}")
    if b.shape != (n, k // 2) or b_s.shape != (n, k // 32):
        raise ValueError(f"fp4_wgmma_gemv needs b [N, K/2] and b_s [N, K/32] for K = {k}, got {tuple(b.shape)} "
                         f"and {tuple(b_s.shape)}")
    bad = [name for name, t in (("a", a), ("a_s", a_s), ("b", b), ("b_s", b_s)) if not t.is_contiguous()]
    if bad:
        raise ValueError(f"fp4_wgmma_gemv needs contiguous operands, got non-contiguous {', '.join(bad)}")
    cfg = WgmmaGemvConfig(*config) if config is not None else pick_config(n, k, m, sm_count(a.device, interpret=132))
    if cfg.stages < 1 or cfg.split < 1 or cfg.warps not in (4, 8):
        raise ValueError(f"fp4_wgmma_gemv config (STAGES, SPLIT[, W]) needs STAGES >= 1, SPLIT >= 1 and W in "
                         f"(4, 8), got {tuple(cfg)}")
    w = cfg.warps
    n_st = k // STAGE_K
    per_split = triton.next_power_of_2(-(-n_st // cfg.split))  # shared-memory shapes must be powers of two
    split = -(-n_st // per_split)  # no empty splits
    nb = wgmma_n(m)
    rows = 16 * w
    if out is not None and (out.shape != (m, n) or out.dtype != torch.bfloat16 or not out.is_contiguous()
                            or out.device != a.device):
        raise ValueError(f"fp4_wgmma_gemv out must be a contiguous bf16 [{m}, {n}] tensor on {a.device}, got "
                         f"{out.dtype} {tuple(out.shape)} on {out.device}")
    c = torch.empty(m, n, dtype=torch.bfloat16, device=a.device) if out is None else out
    w_layout, s_layout = _box_layouts(rows)
    w_desc = TensorDescriptor.from_tensor(b.view(torch.uint8), [rows, 128], w_layout)
    s_desc = TensorDescriptor.from_tensor(b_s.view(torch.uint8), [rows, 16], s_layout)
    tiles = triton.cdiv(n, rows)
    if split > 1:
        ws = torch.empty(split, nb, n, dtype=torch.float32, device=a.device)
        cnt = arrival_counters(a.device, tiles, "fp4_wgmma_gemv")
    else:
        ws = c
        cnt = c
    as_e8m0 = a_s.dtype == torch.float8_e8m0fnu
    _fp4_wgmma_gemv_kernel[(tiles, split)](
        w_desc, s_desc, a.view(torch.uint8).view(torch.int32), a_s.view(torch.uint8) if as_e8m0 else a_s, c, ws,
        cnt, m, n, n_st, k, NB=nb, PER_SPLIT=per_split, STAGES=cfg.stages, SPLIT=split, AS_E8M0=as_e8m0, W=w,
        X_FIRST=cfg.x_first, TRIGGER=cfg.trigger, num_warps=w, launch_pdl=True)
    return c


@functools.cache
def _box_layouts(rows: int):
    """Shared layouts of the TMA boxes (codes [rows, 128 B], 128-byte swizzle; scales [rows,
    16 B], unswizzled): built once per CTA height, not per call."""
    return (gl.NVMMASharedLayout.get_default_for([rows, 128], gl.uint8),
            gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=8, rank=2))
