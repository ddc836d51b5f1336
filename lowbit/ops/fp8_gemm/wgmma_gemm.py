"""The async-wgmma GEMM of ``fp8_gemm`` on sm_90 (Gluon, ``triton.experimental.gluon``): the prefill
band and, with 64 x 64 tiles, the M = 17..64 decode band (the route: ``dispatch.py``).

``C[M, N] bf16 = A[M, K] e4m3 @ B[N, K]^T e4m3`` with DeepSeek block scales: ``a_s [M, K/128]``
(one per row and 128-wide K block) and ``b_s [ceil(N/128), K/128]`` (one per 128x128 block of B),
fp32 or UE8M0. Per K block ``kb`` the fp32 product is scaled before it joins the fp32
accumulator (two-level accumulation)::

    acc += dot(A[:, kb], B[:, kb]^T) * a_s[:, kb, None] * b_s[n_block, kb]

Why Gluon: the tiled ``tl.dot`` kernel (``tiled.py``) lowers ``tl.dot`` to a wgmma that
each warpgroup waits for (``WARPGROUP.DEPBAR``) before its 64 scale FFMAs per thread, so the
tensor cores idle during the scale accumulation (~150 of ~640 cycles per K block). Here each K
block's wgmma is issued asynchronously into its own fp32 tile and retired with
``warpgroup_mma_wait(num_outstanding=1)`` only after the *next* block's wgmma is in flight, so
the FFMAs of block kb overlap the tensor-core work of block kb + 1.

Layout (defaults: 128 x 128 CTA tile, 8 warps = 2 warpgroups):

* Accumulator and dot tiles: ``NVMMADistributedLayout`` v3, ``warps_per_cta = [8, 1]``,
  instruction ``[16, 128, 32]`` (``wgmma m64n128k32``, 4 per K block): warpgroup g owns rows
  64g..64g+63 and all 128 columns. Per thread: 64 fp32 accumulator registers + 2 x 64 for the two
  dot tiles (one in flight, one being scaled); ~230 registers, no spills (offline check).
* Shared ring: ``NUM_STAGES`` x (A ``[BLOCK_M, 128]`` + B ``[BLOCK_N, 128]``) e4m3 in the 128-byte
  swizzled ``NVMMASharedLayout`` that TMA writes and wgmma reads (both K-major; the wgmma sees
  ``b_tile.permute((1, 0))`` as its ``[K, N]`` operand), one mbarrier per stage counting the TMA
  bytes; out-of-bounds rows (M, N edges) arrive zero-filled. 32 KiB per stage.
* Scales: ``a_s`` of the tile's rows in ``SliceLayout(1, mma)`` (each thread loads its 2 rows),
  ``b_s`` a scalar (BLOCK_N <= 128 lies in one 128-row block of B): plain loads issued one K
  block ahead of their FFMA, so their latency hides behind a wgmma.

Schedule (per warpgroup; two register tiles A and B, the K loop unrolled by two)::

    wait TMA(kb) -> issue wgmma kb into B -> wait(1): wgmma kb-1 (tile A) done
        -> acc += A * (a_s * b_s)            [tensor cores busy with kb]
        -> CTA barrier -> TMA of block kb-1+NUM_STAGES into kb-1's stage
    wait TMA(kb+1) -> issue wgmma kb+1 into A -> wait(1): wgmma kb (tile B) done
        -> acc += B * (a_s * b_s) -> CTA barrier -> TMA refill of kb's stage

Register tiles must stay put while their wgmma is in flight: if a wgmma result is copied
(loop-carried value swapped, or an FFMA scheduled after the next wgmma that overwrites it),
ptxas serializes every wgmma (info C7514) and the overlap is gone. Hence: the unroll by two (each
tile its own variable); each wgmma names the already-scaled tile it overwrites as accumulator
input with a run-time-false ``use_acc`` (a compile-time False gives the result fresh registers);
both tiles enter the K loop as zeros (tile A as a stand-in "block -1" with scale 0); and a no-op
``warpgroup_mma_wait`` on ``acc`` pins the FFMAs before the next wgmma issue.

The CTA barrier before a refill is needed because B's stage is read by both warpgroups' wgmmas
while a single thread issues the TMA, and a warpgroup's wgmma wait covers only its own wgmmas.
Triton 3.6's shared-memory barrier analysis also puts a CTA barrier between consecutive mbarrier
operations (expect / TMA / wait: ``canSkipBarSync`` returns in 3.7), about 4 ``bar.sync`` per K
block in this kernel; they cost issue slots, not tensor-core time, as wgmma kb+1 is queued.

Persistence: one program per SM walks tiles p, p + P, ... in grouped order
(``GROUP_M`` row tiles share a weight tile in L2, as ``tile_coords``); its K blocks form one
stream through the ring, so the refills of a tile's last blocks load the next tile's first ones
and the epilogue (bf16 -> shared -> TMA store, not waited for until the buffer is reused)
overlaps those loads. Needs NUM_STAGES <= K/128 (refills reach at most one tile ahead); else one
program per tile.

Warp-specialized variant (``warp_specialize=True``): a 1-warp producer partition issues all TMA
loads (``ready`` / ``empty`` mbarrier pair per stage); the 8 consumer warps run the same wgmma /
FFMA schedule and release stages with an mbarrier arrive after a (partition) barrier, so their
loop has no TMA issue and half the barriers. Register reallocation gives the consumers 240.

Epilogue: the bf16 tile through shared memory and a TMA store (clips the M, N edges) when the
output row pitch is 16-byte aligned (N % 8 == 0), otherwise masked ``gl.store`` from the MMA
layout.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import torch
import triton

from lowbit._backend import sm_count

try:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (
        fence_async_shared,
        mbarrier,
        tma,
        warpgroup_mma,
        warpgroup_mma_init,
        warpgroup_mma_wait,
    )
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from lowbit.ops._gluon_pdl import gdc_wait
    from lowbit.ops._gluon_wgmma import e8m0_decode

    GLUON_ERROR = None
except Exception as e:  # noqa: BLE001 - any failure means "no Gluon path"
    GLUON_ERROR = e

__all__ = ["GLUON_ERROR", "WgmmaGemmConfig", "fp8_gemm_wgmma"]

_BLOCK_K = 128  # the scale block along K: one wgmma group and one scale FMA per K block


if GLUON_ERROR is None:
    @gluon.constexpr_function
    def _mma_layout(BLOCK_M, BLOCK_N, num_warps):
        """wgmma accumulator layout: warps stacked along M so each warpgroup owns
        BLOCK_M / (num_warps / 4) full-width rows (one m16 slab per warp), N in one instruction."""
        assert num_warps % 4 == 0 and BLOCK_M == 16 * num_warps, "need BLOCK_M == 16 * num_warps"
        assert BLOCK_N % 8 == 0 and BLOCK_N <= 256
        return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, BLOCK_N, 32])

    @gluon.jit
    def _row_scales(p, mask, E8M0: gl.constexpr):
        """a_s of the tile's rows at pointers p ([BLOCK_M], rows >= M read as 1)."""
        if E8M0:
            s = e8m0_decode(gl.load(p, mask=mask, other=127).to(gl.int32))
        else:
            s = gl.load(p, mask=mask, other=1.0)
        return s

    @gluon.jit
    def _block_scale(p, E8M0: gl.constexpr):
        """The scalar b_s at p."""
        if E8M0:
            s = e8m0_decode(gl.load(p).to(gl.int32))
        else:
            s = gl.load(p)
        return s

    @gluon.jit
    def _tile_offsets(tile, M, N, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, GROUP_M: gl.constexpr):
        """(first row, first column) of output tile ``tile``, grouped so GROUP_M row tiles that
        run together share a weight tile in L2 (the order of ``tile_coords``)."""
        n_pm = gl.cdiv(M, BLOCK_M)
        n_pn = gl.cdiv(N, BLOCK_N)
        width = GROUP_M * n_pn
        first_m = (tile // width) * GROUP_M
        rows = gl.minimum(n_pm - first_m, GROUP_M)
        return (first_m + (tile % width) % rows) * BLOCK_M, ((tile % width) // rows) * BLOCK_N

    @gluon.jit
    def _load_block(a_desc, b_desc, a_bufs, b_bufs, bars, g, off_m, off_n, kb, NUM_STAGES: gl.constexpr, pred):
        """TMA of K block kb of the tile at (off_m, off_n) -- this program's block number g --
        into stage g % NUM_STAGES (skipped unless pred). The stage's mbarrier expects the full
        box bytes (zero-filled out-of-bounds rows count too)."""
        s = g % NUM_STAGES
        bar = bars.index(s)
        mbarrier.expect(bar, a_desc.block_type.nbytes + b_desc.block_type.nbytes, pred=pred)
        tma.async_copy_global_to_shared(a_desc, [off_m, kb * 128], bar, a_bufs.index(s), pred)
        tma.async_copy_global_to_shared(b_desc, [off_n, kb * 128], bar, b_bufs.index(s), pred)

    @gluon.jit
    def _issue_mma(a_bufs, b_bufs, bars, g, tile, use_acc, NUM_STAGES: gl.constexpr):
        """Wait for block g's tiles and start its wgmma (returns the in-flight token). The result
        lands in ``tile``'s registers; ``use_acc`` (false at run time) discards their value."""
        s = g % NUM_STAGES
        mbarrier.wait(bars.index(s), (g // NUM_STAGES) & 1)
        return warpgroup_mma(a_bufs.index(s), b_bufs.index(s).permute((1, 0)), tile, use_acc=use_acc, is_async=True)

    @gluon.jit
    def _retire(acc, d, s_a, s_b, NUM_OUTSTANDING: gl.constexpr):
        """Wait until at most NUM_OUTSTANDING wgmmas are in flight (so ``d``, the older one, is
        done); returns (acc + d * a_s[:, None] * b_s, d): one FFMA per element (b_s folds into
        a_s), and d's registers are handed to the next wgmma."""
        d = warpgroup_mma_wait(num_outstanding=NUM_OUTSTANDING, deps=(d, ))
        acc = acc + d * gl.expand_dims(s_a * s_b, 1)
        # A second (no-op) wait taking acc pins the FFMAs here: the waits and wgmmas are ordered
        # inline asm, while plain FFMAs would otherwise sink below the next wgmma issue that
        # overwrites d's registers (LLVM then copies d first: 64 MOVs and serialized wgmmas).
        acc = warpgroup_mma_wait(num_outstanding=NUM_OUTSTANDING, deps=(acc, ))
        return acc, d

    @gluon.jit
    def _refill(a_desc, b_desc, a_bufs, b_bufs, bars, g0, kb, off_m, off_n, nxt_m, nxt_n, has_next, n_kb,
                NUM_STAGES: gl.constexpr, pred):
        """Block kb of the current tile (program block g0 + kb) has retired: reload its stage with
        the block NUM_STAGES later -- block kb + NUM_STAGES of this tile or, past its end, of the
        next tile at (nxt_m, nxt_n) (the launcher keeps NUM_STAGES <= n_kb when tiles follow).
        The CTA barrier first makes sure every warpgroup has retired that wgmma: the B tile is
        read by both warpgroups and the TMA is issued by a single thread."""
        gl.thread_barrier()
        j = kb + NUM_STAGES
        here = j < n_kb
        _load_block(a_desc, b_desc, a_bufs, b_bufs, bars, g0 + j, gl.where(here, off_m, nxt_m),
                    gl.where(here, off_n, nxt_n), gl.where(here, j, j - n_kb), NUM_STAGES, pred & (here | has_next))

    @gluon.jit
    def _tile_product(a_desc, b_desc, a_bufs, b_bufs, bars, as_rows, m_mask, bs_blk, g0, first, off_m, off_n, nxt_m,
                      nxt_n, has_next, n_kb, mma: gl.constexpr, AS_E8M0: gl.constexpr, BS_E8M0: gl.constexpr,
                      NUM_STAGES: gl.constexpr):
        """The fp32 [BLOCK_M, BLOCK_N] accumulator of one output tile: sum over K blocks of
        dot * a_s * b_s, with the wgmma of block kb+1 in flight during block kb's FFMAs.

        g0: this program's number of the tile's block 0 (ring stage / mbarrier phase); first: the
        program's first tile (whose prologue loaded blocks 0 .. NUM_STAGES-2 only)."""
        BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
        BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
        row_l: gl.constexpr = gl.SliceLayout(1, mma)
        acc = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, mma)
        # Two register tiles alternate between "in flight" and "being scaled"; each must keep fixed
        # registers, or ptxas copies an in-flight accumulator and then serializes every wgmma
        # (C7514). So: the loop is unrolled by two (tile B: even blocks, tile A: odd blocks); each
        # wgmma names the tile it overwrites (already scaled) as its accumulator input and ignores
        # it through a scale-d predicate that is false at run time (n_kb < 0 never holds; a
        # compile-time False drops the input and gives the result fresh registers); and both tiles
        # enter the loop as zeros -- tile A as a stand-in for "block -1", retired with scale 0 --
        # so no wgmma result flows into the loop from outside (that one got copied on entry).
        never = n_kb < 0
        d_a = warpgroup_mma_init(gl.zeros([BLOCK_M, BLOCK_N], gl.float32, mma))
        tile_b = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, mma)
        s_a_a = gl.zeros([BLOCK_M], gl.float32, row_l)
        s_b_a = 0.0
        s_a = _row_scales(as_rows, m_mask, AS_E8M0)
        s_b = _block_scale(bs_blk, BS_E8M0)
        for i in range(0, n_kb // 2):
            kb = 2 * i  # tile B: block kb; tile A: block kb - 1 (retired here), then kb + 1
            d_b = _issue_mma(a_bufs, b_bufs, bars, g0 + kb, tile_b, never, NUM_STAGES)
            acc, tile_a = _retire(acc, d_a, s_a_a, s_b_a, 1)
            # "Block -1" loads block NUM_STAGES-1 on the first tile; on later tiles the previous
            # tile's last refills already did.
            _refill(a_desc, b_desc, a_bufs, b_bufs, bars, g0, kb - 1, off_m, off_n, nxt_m, nxt_n, has_next, n_kb,
                    NUM_STAGES, (kb > 0) | first)
            d_a = _issue_mma(a_bufs, b_bufs, bars, g0 + kb + 1, tile_a, never, NUM_STAGES)
            # Scales are plain loads issued one block ahead of their FFMAs (latency behind a wgmma).
            s_a_a = _row_scales(as_rows + (kb + 1), m_mask, AS_E8M0)
            s_b_a = _block_scale(bs_blk + (kb + 1), BS_E8M0)
            acc, tile_b = _retire(acc, d_b, s_a, s_b, 1)
            _refill(a_desc, b_desc, a_bufs, b_bufs, bars, g0, kb, off_m, off_n, nxt_m, nxt_n, has_next, n_kb,
                    NUM_STAGES, True)
            kb_next = gl.minimum(kb + 2, n_kb - 1)  # the last pair of an even n_kb reloads its own
            s_a = _row_scales(as_rows + kb_next, m_mask, AS_E8M0)
            s_b = _block_scale(bs_blk + kb_next, BS_E8M0)
        # Tail: tile A holds the last odd block (or the zero stand-in); an odd n_kb leaves one more.
        if n_kb % 2 == 1:
            d_b = _issue_mma(a_bufs, b_bufs, bars, g0 + n_kb - 1, tile_b, never, NUM_STAGES)
            acc, tile_a = _retire(acc, d_a, s_a_a, s_b_a, 1)
            _refill(a_desc, b_desc, a_bufs, b_bufs, bars, g0, n_kb - 2, off_m, off_n, nxt_m, nxt_n, has_next, n_kb,
                    NUM_STAGES, (n_kb > 1) | first)
            acc, tile_b = _retire(acc, d_b, s_a, s_b, 0)
        else:
            acc, tile_a = _retire(acc, d_a, s_a_a, s_b_a, 0)
        _refill(a_desc, b_desc, a_bufs, b_bufs, bars, g0, n_kb - 1, off_m, off_n, nxt_m, nxt_n, has_next, n_kb,
                NUM_STAGES, True)
        return acc

    @gluon.jit(do_not_specialize=["M", "n_kb"])
    def _fp8_gemm_gluon_kernel(
        a_desc, as_ptr, b_desc, bs_ptr, c_ptr, c_desc, M, N, n_kb,
        AS_E8M0: gl.constexpr, BS_E8M0: gl.constexpr, TMA_STORE: gl.constexpr,
        GROUP_M: gl.constexpr, NUM_STAGES: gl.constexpr, num_warps: gl.constexpr, PDL: gl.constexpr = False,
    ):
        """a_desc: TMA descriptor of A [M, K] e4m3, box [BLOCK_M, 128]; b_desc: B [N, K], box
        [BLOCK_N, 128]; as_ptr: a_s [M, n_kb]; bs_ptr: b_s [ceil(N/128), n_kb] (fp32, or UE8M0
        bytes when *_E8M0); c_ptr: C [M, N] bf16; c_desc: TMA descriptor of C, box
        [BLOCK_M, BLOCK_N] (TMA_STORE only, else None).

        Program p computes tiles p, p + P, p + 2P, ... (P programs; P = #tiles gives one tile
        each). Its K blocks form one stream through the ring, so the loads of the next tile's
        first blocks are in flight during this tile's last blocks and its epilogue. PDL (a launch
        with ``launch_pdl=True``): nothing global is touched before ``griddepcontrol.wait``
        (lowbit/ops/_gluon_pdl.py)."""
        BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
        BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
        BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
        gl.static_assert(BLOCK_K == 128, "one K block per scale block")
        gl.static_assert(128 % BLOCK_N == 0, "BLOCK_N must lie inside one 128-row block of b_s")
        gl.static_assert(NUM_STAGES >= 2)
        mma: gl.constexpr = _mma_layout(BLOCK_M, BLOCK_N, num_warps)
        row_l: gl.constexpr = gl.SliceLayout(1, mma)

        pid = gl.program_id(0)
        n_prog = gl.num_programs(0)
        n_tiles = gl.cdiv(M, BLOCK_M) * gl.cdiv(N, BLOCK_N)
        n_my = (n_tiles - pid + n_prog - 1) // n_prog
        if PDL:
            gdc_wait()

        a_bufs = gl.allocate_shared_memory(a_desc.dtype, [NUM_STAGES, BLOCK_M, BLOCK_K], a_desc.layout)
        b_bufs = gl.allocate_shared_memory(b_desc.dtype, [NUM_STAGES, BLOCK_N, BLOCK_K], b_desc.layout)
        bars = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
        if TMA_STORE:
            # Own buffer (not aliasing the ring, which is being refilled for the next tile).
            c_smem = gl.allocate_shared_memory(gl.bfloat16, [BLOCK_M, BLOCK_N], c_desc.layout)
        for i in gl.static_range(NUM_STAGES):
            mbarrier.init(bars.index(i), count=1)
        fence_async_shared()  # barrier inits visible to the TMA unit before the first copy

        off_m, off_n = _tile_offsets(pid, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        # Blocks 0 .. NUM_STAGES-2 of the first tile; its first refill (of "block -1") loads the next.
        for i in gl.static_range(NUM_STAGES - 1):
            _load_block(a_desc, b_desc, a_bufs, b_bufs, bars, i, off_m, off_n, i, NUM_STAGES, i < n_kb)

        for t in range(0, n_my):
            has_next = t + 1 < n_my
            nxt_m, nxt_n = _tile_offsets(gl.minimum(pid + (t + 1) * n_prog, n_tiles - 1), M, N, BLOCK_M, BLOCK_N,
                                         GROUP_M)
            offs_m = off_m + gl.arange(0, BLOCK_M, layout=row_l)
            m_mask = offs_m < M
            as_rows = as_ptr + offs_m.to(gl.int64) * n_kb  # a_s[row, 0]
            bs_blk = bs_ptr + ((off_n // 128) * n_kb).to(gl.int64)  # b_s[n_block, 0]
            acc = _tile_product(a_desc, b_desc, a_bufs, b_bufs, bars, as_rows, m_mask, bs_blk, t * n_kb, t == 0,
                                off_m, off_n, nxt_m, nxt_n, has_next, n_kb, mma, AS_E8M0, BS_E8M0, NUM_STAGES)
            out = acc.to(gl.bfloat16)
            if TMA_STORE:
                tma.store_wait(pendings=0)  # the previous tile's store has read c_smem ...
                gl.thread_barrier()  # ... before any warp overwrites it
                c_smem.store(out)
                fence_async_shared()  # generic-proxy smem writes -> visible to the TMA (async proxy)
                tma.async_copy_shared_to_global(c_desc, [off_m, off_n], c_smem)  # clips the M, N edges
            else:
                offs_n = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, mma))
                ptrs = c_ptr + gl.expand_dims(offs_m.to(gl.int64) * N, 1) + gl.expand_dims(offs_n, 0)
                mask = gl.expand_dims(m_mask, 1) & gl.expand_dims(offs_n < N, 0)
                gl.store(ptrs, out, mask=mask)
            off_m = nxt_m
            off_n = nxt_n

        if TMA_STORE:
            tma.store_wait(pendings=0)
        # Every warp is past its last mbarrier wait before the barriers are invalidated.
        gl.thread_barrier()
        for i in gl.static_range(NUM_STAGES):
            mbarrier.invalidate(bars.index(i))


    # warp-specialized form: a 1-warp TMA producer partition, the consumer warps as above
    @gluon.jit
    def _release(empty, g, NUM_STAGES: gl.constexpr, pred):
        """Block g has retired: hand its stage back to the producer. The barrier (over the consumer
        warps) makes sure both warpgroups have retired that wgmma; the arrive is one thread's."""
        gl.thread_barrier()
        mbarrier.arrive(empty.index(gl.maximum(g, 0) % NUM_STAGES), pred=pred)

    @gluon.jit
    def _ws_tile_product(a_bufs, b_bufs, ready, empty, as_rows, m_mask, bs_blk, g0, n_kb, mma: gl.constexpr,
                         AS_E8M0: gl.constexpr, BS_E8M0: gl.constexpr, NUM_STAGES: gl.constexpr):
        """``_tile_product`` for the consumer partition: the same two-tile wgmma / FFMA schedule,
        with stage releases (mbarrier arrives) instead of TMA refills."""
        BLOCK_M: gl.constexpr = a_bufs.shape[1]
        BLOCK_N: gl.constexpr = b_bufs.shape[1]
        row_l: gl.constexpr = gl.SliceLayout(1, mma)
        acc = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, mma)
        never = n_kb < 0  # see _tile_product
        d_a = warpgroup_mma_init(gl.zeros([BLOCK_M, BLOCK_N], gl.float32, mma))
        tile_b = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, mma)
        s_a_a = gl.zeros([BLOCK_M], gl.float32, row_l)
        s_b_a = 0.0
        s_a = _row_scales(as_rows, m_mask, AS_E8M0)
        s_b = _block_scale(bs_blk, BS_E8M0)
        for i in range(0, n_kb // 2):
            kb = 2 * i
            d_b = _issue_mma(a_bufs, b_bufs, ready, g0 + kb, tile_b, never, NUM_STAGES)
            acc, tile_a = _retire(acc, d_a, s_a_a, s_b_a, 1)
            _release(empty, g0 + kb - 1, NUM_STAGES, kb > 0)
            d_a = _issue_mma(a_bufs, b_bufs, ready, g0 + kb + 1, tile_a, never, NUM_STAGES)
            s_a_a = _row_scales(as_rows + (kb + 1), m_mask, AS_E8M0)
            s_b_a = _block_scale(bs_blk + (kb + 1), BS_E8M0)
            acc, tile_b = _retire(acc, d_b, s_a, s_b, 1)
            _release(empty, g0 + kb, NUM_STAGES, True)
            kb_next = gl.minimum(kb + 2, n_kb - 1)
            s_a = _row_scales(as_rows + kb_next, m_mask, AS_E8M0)
            s_b = _block_scale(bs_blk + kb_next, BS_E8M0)
        if n_kb % 2 == 1:
            d_b = _issue_mma(a_bufs, b_bufs, ready, g0 + n_kb - 1, tile_b, never, NUM_STAGES)
            acc, tile_a = _retire(acc, d_a, s_a_a, s_b_a, 1)
            _release(empty, g0 + n_kb - 2, NUM_STAGES, n_kb > 1)
            acc, tile_b = _retire(acc, d_b, s_a, s_b, 0)
        else:
            acc, tile_a = _retire(acc, d_a, s_a_a, s_b_a, 0)
        _release(empty, g0 + n_kb - 1, NUM_STAGES, True)
        return acc

    @gluon.jit
    def _ws_consumer(a_bufs, b_bufs, ready, empty, c_smem, as_ptr, bs_ptr, c_ptr, c_desc, M, N, n_kb,
                     AS_E8M0: gl.constexpr, BS_E8M0: gl.constexpr, TMA_STORE: gl.constexpr, GROUP_M: gl.constexpr,
                     NUM_STAGES: gl.constexpr, num_warps: gl.constexpr):
        """Default partition (num_warps warps): wgmma, scale FFMAs and epilogue of this program's
        tiles p, p + P, ..."""
        BLOCK_M: gl.constexpr = a_bufs.shape[1]
        BLOCK_N: gl.constexpr = b_bufs.shape[1]
        mma: gl.constexpr = _mma_layout(BLOCK_M, BLOCK_N, num_warps)
        row_l: gl.constexpr = gl.SliceLayout(1, mma)
        pid = gl.program_id(0)
        n_prog = gl.num_programs(0)
        n_tiles = gl.cdiv(M, BLOCK_M) * gl.cdiv(N, BLOCK_N)
        for t in range(0, (n_tiles - pid + n_prog - 1) // n_prog):
            off_m, off_n = _tile_offsets(pid + t * n_prog, M, N, BLOCK_M, BLOCK_N, GROUP_M)
            offs_m = off_m + gl.arange(0, BLOCK_M, layout=row_l)
            m_mask = offs_m < M
            as_rows = as_ptr + offs_m.to(gl.int64) * n_kb
            bs_blk = bs_ptr + ((off_n // 128) * n_kb).to(gl.int64)
            acc = _ws_tile_product(a_bufs, b_bufs, ready, empty, as_rows, m_mask, bs_blk, t * n_kb, n_kb, mma,
                                   AS_E8M0, BS_E8M0, NUM_STAGES)
            out = acc.to(gl.bfloat16)
            if TMA_STORE:
                tma.store_wait(pendings=0)
                gl.thread_barrier()
                c_smem.store(out)
                fence_async_shared()
                tma.async_copy_shared_to_global(c_desc, [off_m, off_n], c_smem)
            else:
                offs_n = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, mma))
                ptrs = c_ptr + gl.expand_dims(offs_m.to(gl.int64) * N, 1) + gl.expand_dims(offs_n, 0)
                mask = gl.expand_dims(m_mask, 1) & gl.expand_dims(offs_n < N, 0)
                gl.store(ptrs, out, mask=mask)
        if TMA_STORE:
            tma.store_wait(pendings=0)

    @gluon.jit
    def _ws_producer(a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, n_kb, GROUP_M: gl.constexpr,
                     NUM_STAGES: gl.constexpr):
        """Worker partition (1 warp): TMA loads of this program's K-block stream, each into the
        stage the consumers released NUM_STAGES blocks earlier (free on the first lap: a wait
        on parity 1 of a fresh mbarrier returns at once)."""
        BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
        BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
        pid = gl.program_id(0)
        n_prog = gl.num_programs(0)
        n_tiles = gl.cdiv(M, BLOCK_M) * gl.cdiv(N, BLOCK_N)
        for t in range(0, (n_tiles - pid + n_prog - 1) // n_prog):
            off_m, off_n = _tile_offsets(pid + t * n_prog, M, N, BLOCK_M, BLOCK_N, GROUP_M)
            for kb in range(0, n_kb):
                g = t * n_kb + kb
                s = g % NUM_STAGES
                mbarrier.wait(empty.index(s), ((g // NUM_STAGES) & 1) ^ 1)
                bar = ready.index(s)
                mbarrier.expect(bar, a_desc.block_type.nbytes + b_desc.block_type.nbytes)
                tma.async_copy_global_to_shared(a_desc, [off_m, kb * 128], bar, a_bufs.index(s))
                tma.async_copy_global_to_shared(b_desc, [off_n, kb * 128], bar, b_bufs.index(s))

    @gluon.jit(do_not_specialize=["M", "n_kb"])
    def _fp8_gemm_gluon_ws_kernel(
        a_desc, as_ptr, b_desc, bs_ptr, c_ptr, c_desc, M, N, n_kb,
        AS_E8M0: gl.constexpr, BS_E8M0: gl.constexpr, TMA_STORE: gl.constexpr,
        GROUP_M: gl.constexpr, NUM_STAGES: gl.constexpr, PRODUCER_REGS: gl.constexpr, num_warps: gl.constexpr,
    ):
        """Warp-specialized, persistent form of ``_fp8_gemm_gluon_kernel`` (same arguments): a
        1-warp producer partition issues the TMA loads; the num_warps consumer warps only wait
        for ready stages, run the wgmma / FFMA schedule and release stages (``ready`` / ``empty``
        mbarrier pairs), so their loop carries no TMA issue and fewer CTA barriers."""
        BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
        BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
        BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
        gl.static_assert(BLOCK_K == 128, "one K block per scale block")
        gl.static_assert(128 % BLOCK_N == 0, "BLOCK_N must lie inside one 128-row block of b_s")
        a_bufs = gl.allocate_shared_memory(a_desc.dtype, [NUM_STAGES, BLOCK_M, BLOCK_K], a_desc.layout)
        b_bufs = gl.allocate_shared_memory(b_desc.dtype, [NUM_STAGES, BLOCK_N, BLOCK_K], b_desc.layout)
        ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
        empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
        if TMA_STORE:
            c_smem = gl.allocate_shared_memory(gl.bfloat16, [BLOCK_M, BLOCK_N], c_desc.layout)
        else:
            c_smem = gl.allocate_shared_memory(gl.bfloat16, [16, 16], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
        for i in gl.static_range(NUM_STAGES):
            mbarrier.init(ready.index(i), count=1)
            mbarrier.init(empty.index(i), count=1)
        fence_async_shared()
        gl.warp_specialize([
            (_ws_consumer, (a_bufs, b_bufs, ready, empty, c_smem, as_ptr, bs_ptr, c_ptr, c_desc, M, N, n_kb, AS_E8M0,
                            BS_E8M0, TMA_STORE, GROUP_M, NUM_STAGES, num_warps)),
            (_ws_producer, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, n_kb, GROUP_M, NUM_STAGES)),
        ], [1], [PRODUCER_REGS])
        for i in gl.static_range(NUM_STAGES):
            mbarrier.invalidate(ready.index(i))
            mbarrier.invalidate(empty.index(i))


class WgmmaGemmConfig(NamedTuple):
    """Launch configuration of :func:`fp8_gemm_wgmma`.

    ``block_m`` must be 16 * ``warps``; ``block_n`` must divide 128. ``warp_specialize``: the form
    with a 1-warp TMA producer partition. ``pdl`` (single-partition form only): a programmatic
    dependent launch, its start overlapping the previous kernel's tail (lowbit/ops/_gluon_pdl.py)."""

    block_m: int = 128
    block_n: int = 128
    warps: int = 8
    stages: int = 4
    group_m: int = 16
    warp_specialize: bool = False
    pdl: bool = False


_PRODUCER_REGS = 40  # registers of the warp-specialized form's 1-warp TMA producer


@functools.lru_cache(maxsize=None)
def _smem_layouts(block_m: int, block_n: int):
    a_l = gl.NVMMASharedLayout.get_default_for([block_m, _BLOCK_K], gl.float8e4nv)
    b_l = gl.NVMMASharedLayout.get_default_for([block_n, _BLOCK_K], gl.float8e4nv)
    c_l = gl.NVMMASharedLayout.get_default_for([block_m, block_n], gl.bfloat16)
    return a_l, b_l, c_l


def _scale_arg(s: torch.Tensor):
    """(tensor the kernel reads, is_e8m0): UE8M0 scales travel as their uint8 bytes."""
    if s.dtype == torch.float8_e8m0fnu:
        return s.view(torch.uint8), True
    return s, s.dtype == torch.uint8


def fp8_gemm_wgmma(a: torch.Tensor, a_s: torch.Tensor, b: torch.Tensor, b_s: torch.Tensor,
                   config: WgmmaGemmConfig = WgmmaGemmConfig(), out: torch.Tensor | None = None) -> torch.Tensor:
    """``C = A @ B^T`` (bf16 ``[M, N]``) with the async-wgmma kernel (sm_90).

    a: e4m3 ``[M, K]``, a_s: ``[M, K/128]``; b: e4m3 ``[N, K]``, b_s: ``[ceil(N/128), K/128]``.
    Scales fp32 or UE8M0 (``torch.float8_e8m0fnu``). Inputs are assumed validated: contiguous,
    16-byte aligned, K % 128 == 0, on one CUDA device. The grid is persistent (one program per SM
    looping over tiles, so the next tile's loads overlap this tile's tail and epilogue); the
    single-partition form needs stages <= K/128 for that and otherwise runs one program per tile.
    ``out``: optional contiguous bf16 ``[M, N]`` to write (tests pre-fill it with NaN to catch
    unwritten elements); returned."""
    cfg = WgmmaGemmConfig(*config)
    if cfg.pdl and cfg.warp_specialize:
        raise ValueError("fp8_gemm_wgmma: pdl=True is for the single-partition kernel (warp_specialize=False)")
    m, k = a.shape
    n = b.shape[0]
    c = torch.empty((m, n), dtype=torch.bfloat16, device=a.device) if out is None else out
    if m == 0 or n == 0:
        return c
    a_s, as_e8m0 = _scale_arg(a_s)
    b_s, bs_e8m0 = _scale_arg(b_s)
    a_l, b_l, c_l = _smem_layouts(cfg.block_m, cfg.block_n)
    a_desc = TensorDescriptor.from_tensor(a, [cfg.block_m, _BLOCK_K], a_l)
    b_desc = TensorDescriptor.from_tensor(b, [cfg.block_n, _BLOCK_K], b_l)
    # TMA store needs a 16-byte row pitch; otherwise the kernel stores with masks.
    tma_store = n % 8 == 0 and c.data_ptr() % 16 == 0
    c_desc = TensorDescriptor.from_tensor(c, [cfg.block_m, cfg.block_n], c_l) if tma_store else None
    n_kb = k // _BLOCK_K
    tiles = triton.cdiv(m, cfg.block_m) * triton.cdiv(n, cfg.block_n)
    meta = dict(AS_E8M0=as_e8m0, BS_E8M0=bs_e8m0, TMA_STORE=tma_store, GROUP_M=cfg.group_m, NUM_STAGES=cfg.stages,
                num_warps=cfg.warps)
    args = (a_desc, a_s, b_desc, b_s, c, c_desc, m, n, n_kb)
    sms = sm_count(a.device, interpret=1)
    if cfg.warp_specialize:
        _fp8_gemm_gluon_ws_kernel[(min(tiles, sms), )](*args, PRODUCER_REGS=_PRODUCER_REGS, **meta)
    else:
        # The refill of the single-partition kernel reaches at most one tile ahead: stages <= n_kb.
        progs = min(tiles, sms) if cfg.stages <= n_kb else tiles
        if cfg.pdl:
            meta.update(PDL=True, launch_pdl=True)
        _fp8_gemm_gluon_kernel[(progs, )](*args, **meta)
    return c
