"""Where the INT2 whole-row coarse pass's time goes: the warp-specialized kernel
(``gluon_wgmma._coarse_ws_kernel``) with parts of its consumer's stage taken out.

    PYTHONPATH=$PWD python3 scripts/probe_coarse_ring.py [--ms 1,8,16] [--json out.json]

Variants, each the shipped producer partition, ring, launch geometry and candidate epilogue:

* ``ring``: the consumers only wait for each stage's TMA and hand the slot back (no shared-memory
  reads): what the TMA stream costs in this geometry.
* ``mma``: + the shared-memory loads of the codes and the stage's 8 wgmmas against the x tiles,
  with the raw code bytes as the A operand (no byte-permute decode, no table words).
* ``decode``: the table build and byte-permute decode of the group codes and codes (XOR-folded
  to stay live), no wgmmas.
* ``full``: the shipped stage (``_stage_sum_table``).
* ``--feeds``: ring mode on a probe-local producer (``_feed_kernel``) whose stages bring the codes
  and, per ``FEEDS``, the group codes and / or the x tiles -- or the block's group codes in one box
  at its start -- so the ring's cost is split by operand (thirty-third session: the bare ring is
  1.19-1.31x the floor, a codes-only ring was ~1.0x in session 25).

Each with KCAND 8 and 1 (the epilogue's successive max-and-mask rounds), ring depths 4 and 8; x
in side-by-side tiles (``--narrow``: per-plane tiles of 32-byte rows, as in session 25's call a).
One row block a program (not persistent), no PDL.
Times: median CUDA-graph replay of the kernel alone (x tiles prepared outside), against the
INT2 byte floor (codes + words at the measured copy bandwidth) and the shipped ``coarse_wgmma``
call (x preparation included) in the same run. Only the ``full`` variant's results are checked
(against the shipped kernel's candidates).
"""
from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon.language.nvidia.hopper import (  # noqa: E402
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from lowbit.ops._gluon_wgmma import acc_layout, invalidate_ring_barriers, ring_barriers  # noqa: E402
from lowbit.ops.coarse_head.gluon_emit import emit_candidates  # noqa: E402
from lowbit.ops.coarse_head.gluon_wgmma import (  # noqa: E402
    _codes_layout,
    _chunk_tables,
    _prmt_word,
    _stage_sum_table,
    _ws_producer,
    _x_tile,
)

MODES = {"ring": 0, "mma": 1, "full": 2, "decode": 3}
#: what the ring kernel's stages bring besides the codes (``_feed_kernel`` FEED bits: 1 the group
#: codes a stage, as shipped; 2 the x tiles a stage, as shipped; 4 all of the block's group codes in
#: one TMA box at its start instead of a box a stage)
FEEDS = {"shipped": 3, "no words": 2, "no x": 1, "codes only": 0, "words per block": 6}


@gluon.jit
def _stage_mma_raw(acc, w_bufs, xt_bufs, slot, NB: gl.constexpr, W: gl.constexpr, P: gl.constexpr,
                   XW: gl.constexpr):
    """The stage's 8 wgmmas with the raw code bytes as A (what the decode would feed them)."""
    mma: gl.constexpr = acc_layout(NB, W)
    a_l: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=4)
    wb = w_bufs.index(slot)
    q0 = wb.slice(0, 32, dim=1).load(_codes_layout(W)).to(gl.int8, bitcast=True)
    q1 = wb.slice(32, 32, dim=1).load(_codes_layout(W)).to(gl.int8, bitcast=True)
    for h in gl.static_range(2):
        a = gl.convert_layout(q0 if h == 0 else q1, a_l, assert_trivial=True)
        for j in gl.static_range(4):
            acc = warpgroup_mma(a, _x_tile(xt_bufs, slot, j, h, P, XW), acc, is_async=True)
    return warpgroup_mma_wait(num_outstanding=0, deps=(acc,))


@gluon.jit
def _stage_decode_only(fold, w_bufs, code_rows, slot, W: gl.constexpr):
    """The stage's table build and byte-permute decode, its 8 weight registers XOR-folded into
    ``fold`` (int8 [R, 32]) instead of fed to wgmmas: the decode's cost without the MMA chain."""
    c_l: gl.constexpr = _codes_layout(W)
    r_l: gl.constexpr = gl.SliceLayout(1, c_l)
    wb = w_bufs.index(slot)
    t0, t1, t2, t3 = _chunk_tables(code_rows, slot, r_l)
    v0 = _prmt_word(wb.slice(0, 32, dim=1).load(c_l), t0, t2, t1, t3)
    v1 = _prmt_word(wb.slice(32, 32, dim=1).load(c_l), t0, t2, t1, t3)
    for j in gl.static_range(4):
        fold = fold ^ v0[j] ^ v1[j]
    return fold


@gluon.jit
def _probe_consumer(w_bufs, code_rows, xt_bufs, ready, empty, sx_ptr, r_ptr, ck_ptr, ci_ptr, lg_ptr, M, N, NBLK, NS,
                    NB: gl.constexpr, P: gl.constexpr, STAGES: gl.constexpr, KCAND: gl.constexpr, W: gl.constexpr,
                    MODE: gl.constexpr, XW: gl.constexpr):
    R: gl.constexpr = 16 * W
    mma: gl.constexpr = acc_layout(NB, W)
    sx = gl.load(sx_ptr + gl.arange(0, NB, layout=gl.SliceLayout(0, mma)))
    blk = gl.program_id(0)
    row0 = blk * R
    acc = gl.zeros([R, NB], gl.int32, mma)
    fold = gl.zeros([R, 32], gl.int8, _codes_layout(W))
    for i0 in range(0, NS, STAGES):
        phase = (i0 // STAGES) & 1
        for slot in gl.static_range(STAGES):
            if i0 + slot < NS:
                mbarrier.wait(ready.index(slot), phase)
                if MODE == 1:
                    acc = _stage_mma_raw(acc, w_bufs, xt_bufs, slot, NB, W, P, XW)
                elif MODE == 2:
                    acc = _stage_sum_table(acc, w_bufs, code_rows, xt_bufs, slot, slot, NB, W, P, 1, XW)
                elif MODE == 3:
                    fold = _stage_decode_only(fold, w_bufs, code_rows, slot, W)
                gl.thread_barrier()
                mbarrier.arrive(empty.index(slot))
    if MODE == 3:  # keep the decode live: its fold lands in every column of the row
        kept = gl.sum(fold.to(gl.int32), axis=1)
        acc = acc + gl.expand_dims(gl.convert_layout(kept, gl.SliceLayout(1, mma)), 1)
    rows = row0 + gl.arange(0, R, layout=gl.SliceLayout(1, mma))
    r = gl.load(r_ptr + rows, mask=rows < N, other=0.0)
    out = acc.to(gl.float32) * gl.expand_dims(r, 1) * gl.expand_dims(sx, 0)
    emit_candidates(out, row0, blk, ck_ptr, ci_ptr, lg_ptr, M, N, NBLK, NB, W, KCAND, False)


@gluon.jit(do_not_specialize=["M", "N", "NBLK", "NS", "GRID"])
def _probe_kernel(w_desc, sz_desc, x_desc, xs_desc, sx_ptr, r_ptr, ck_ptr, ci_ptr, lg_ptr, M, N, NBLK, NS, GRID,
                  NB: gl.constexpr, P: gl.constexpr, STAGES: gl.constexpr, KCAND: gl.constexpr, W: gl.constexpr,
                  PRODUCER_REGS: gl.constexpr, MODE: gl.constexpr, XW: gl.constexpr):
    """``_coarse_ws_kernel`` (one row block a program) with the consumer's stage of MODE."""
    R: gl.constexpr = 16 * W
    xt_sl: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=32, element_bitwidth=8, rank=2)
    w_bufs = gl.allocate_shared_memory(gl.uint8, [STAGES, R, 64], w_desc.layout)
    sz_bufs = gl.allocate_shared_memory(gl.int32, [STAGES, 2, R], sz_desc.layout)  # group codes
    code_rows = sz_bufs._reinterpret(gl.int32, [STAGES * 2, R], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    if XW:  # x as side-by-side tiles (``gluon_wgmma.X_WIDE``)
        x_bufs = gl.allocate_shared_memory(gl.int8, [STAGES * 2, NB, 32 * P], x_desc.layout)
        xt_bufs = x_bufs
    else:
        x_bufs = gl.allocate_shared_memory(gl.int8, [STAGES * P, 2 * NB, 32], x_desc.layout)
        xt_bufs = x_bufs._reinterpret(gl.int8, [STAGES * P * 2, NB, 32], xt_sl)
    xs_bufs = gl.allocate_shared_memory(gl.int32, [1, 4, NB], xs_desc.layout)
    ready, empty, side = ring_barriers(STAGES)  # side: unused here
    gl.warp_specialize([
        (_probe_consumer, (w_bufs, code_rows, xt_bufs, ready, empty, sx_ptr, r_ptr, ck_ptr, ci_ptr, lg_ptr, M, N, NBLK,
                           NS, NB, P, STAGES, KCAND, W, MODE, XW)),
        (_ws_producer, (w_desc, sz_desc, x_desc, xs_desc, w_bufs, sz_bufs, x_bufs, xs_bufs, ready, empty, NBLK,
                              NS, GRID, STAGES, P, NB, R, XW)),
    ], [1], [PRODUCER_REGS])
    invalidate_ring_barriers(ready, empty, side, STAGES)


@gluon.jit
def _feed_consumer(ready, empty, wbar, sx_ptr, ck_ptr, ci_ptr, M, N, NBLK, NS, NB: gl.constexpr,
                   STAGES: gl.constexpr, KCAND: gl.constexpr, W: gl.constexpr, FEED: gl.constexpr):
    """Ring mode over the FEED geometry: wait for each stage (FEED 4: first for the block's group
    codes) and hand its slot back, then the shipped candidate epilogue over zero sums."""
    R: gl.constexpr = 16 * W
    mma: gl.constexpr = acc_layout(NB, W)
    sx = gl.load(sx_ptr + gl.arange(0, NB, layout=gl.SliceLayout(0, mma)))
    if FEED & 4:
        mbarrier.wait(wbar.index(0), 0)
    for i0 in range(0, NS, STAGES):
        phase = (i0 // STAGES) & 1
        for slot in gl.static_range(STAGES):
            if i0 + slot < NS:
                mbarrier.wait(ready.index(slot), phase)
                gl.thread_barrier()
                mbarrier.arrive(empty.index(slot))
    blk = gl.program_id(0)
    out = gl.zeros([R, NB], gl.float32, mma) * gl.expand_dims(sx, 0)
    emit_candidates(out, blk * R, blk, ck_ptr, ci_ptr, ck_ptr, M, N, NBLK, NB, W, KCAND, False)


@gluon.jit
def _feed_producer(w_desc, sz_desc, szb_desc, szr_desc, x_desc, w_bufs, sz_bufs, szb_buf, szr_buf, x_bufs, ready,
                   empty, wbar, NS, STAGES: gl.constexpr, NB: gl.constexpr, R: gl.constexpr, FEED: gl.constexpr):
    """The shipped producer's TMA issue (codes [R, 64], group codes [2, R], the two side-by-side x
    tiles [NB, 128] a stage) with parts left out or moved per FEED (see ``FEEDS``)."""
    row0 = gl.program_id(0) * R
    if FEED & 4:  # the block's 2 NS rows of group codes as two power-of-two boxes (NSB + the rest)
        NSB: gl.constexpr = szb_desc.block_type.shape[0]
        mbarrier.expect(wbar.index(0), szb_desc.block_type.nbytes + szr_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(szb_desc, [0, row0], wbar.index(0), szb_buf)
        tma.async_copy_global_to_shared(szr_desc, [NSB, row0], wbar.index(0), szr_buf)
    nbytes: gl.constexpr = (w_desc.block_type.nbytes + (sz_desc.block_type.nbytes if FEED & 1 else 0)
                            + (2 * x_desc.block_type.nbytes if FEED & 2 else 0))
    for i in range(0, NS):
        slot = i % STAGES
        bar = ready.index(slot)
        mbarrier.wait(empty.index(slot), ((i // STAGES) & 1) ^ 1)
        mbarrier.expect(bar, nbytes)
        tma.async_copy_global_to_shared(w_desc, [row0, i * 64], bar, w_bufs.index(slot))
        if FEED & 1:
            tma.async_copy_global_to_shared(sz_desc, [2 * i, row0], bar, sz_bufs.index(slot))
        if FEED & 2:
            for j in gl.static_range(2):
                tma.async_copy_global_to_shared(x_desc, [(i * 2 + j) * NB, 0], bar, x_bufs.index(slot * 2 + j))


@gluon.jit(do_not_specialize=["M", "N", "NBLK", "NS"])
def _feed_kernel(w_desc, sz_desc, szb_desc, szr_desc, x_desc, sx_ptr, ck_ptr, ci_ptr, M, N, NBLK, NS,
                 NB: gl.constexpr, STAGES: gl.constexpr, KCAND: gl.constexpr, W: gl.constexpr,
                 PRODUCER_REGS: gl.constexpr, FEED: gl.constexpr):
    """A one-block-a-program ring of the INT2 whole-row pass's operands (x side by side, P = 4), its
    stage feed chosen by FEED. FEED 4: the block's 2 NS rows of group codes in two power-of-two
    boxes (``szb_desc`` rows 0.., ``szr_desc`` the rest: 32 + 8 rows for K = 5120, 20 KB)."""
    R: gl.constexpr = 16 * W
    w_bufs = gl.allocate_shared_memory(gl.uint8, [STAGES, R, 64], w_desc.layout)
    sz_bufs = gl.allocate_shared_memory(gl.int32, [STAGES, 2, R], sz_desc.layout)
    szb_buf = gl.allocate_shared_memory(gl.int32, szb_desc.block_type.shape, szb_desc.layout)
    szr_buf = gl.allocate_shared_memory(gl.int32, szr_desc.block_type.shape, szr_desc.layout)
    x_bufs = gl.allocate_shared_memory(gl.int8, [STAGES * 2, NB, 128], x_desc.layout)
    ready, empty, wbar = ring_barriers(STAGES)  # wbar: the block's words in one load
    gl.warp_specialize([
        (_feed_consumer, (ready, empty, wbar, sx_ptr, ck_ptr, ci_ptr, M, N, NBLK, NS, NB, STAGES, KCAND, W, FEED)),
        (_feed_producer, (w_desc, sz_desc, szb_desc, szr_desc, x_desc, w_bufs, sz_bufs, szb_buf, szr_buf, x_bufs,
                          ready, empty, wbar, NS, STAGES, NB, R, FEED)),
    ], [1], [PRODUCER_REGS])
    invalidate_ring_barriers(ready, empty, wbar, STAGES)


def _ring_inputs(x, packed, n: int, kcand: int, block: int, wide: bool):
    """What both launchers prepare outside the timed kernel: (M, plane bytes L, NB, candidate blocks,
    x tiles, x sums, x scales, candidate keys, candidate indices) for the INT2 whole-row pass."""
    import torch

    from lowbit.ops.coarse_head.x_int8 import x_int8_tiles

    m = x.shape[0]
    ell = packed.shape[1]
    nb = max(8, 1 << (m - 1).bit_length())
    xq, xs, sx = x_int8_tiles(x, ell, 4, nb, perm=True, wide=wide)
    nblk = -(-n // block)
    ck = torch.empty(m, nblk * kcand, device=x.device)
    ci = torch.empty(m, nblk * kcand, device=x.device, dtype=torch.int64)
    return m, ell, nb, nblk, xq, xs, sx, ck, ci


def feed_launcher(x, packed, words, *, n: int, feed: str, stages: int = 4, kcand: int = 8, block: int = 128):
    """A closure launching ``_feed_kernel`` (FEEDS[feed]) on prepared x tiles, the shipped register
    cap and one row block a program."""
    import torch
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from lowbit.ops._gluon_resident import resident_ctas
    from lowbit.ops.coarse_head import gluon_wgmma as g

    m, ell, nb, nblk, xq, _, sx, ck, ci = _ring_inputs(x, packed, n, kcand, block, True)
    ns = ell // 64
    w_l, sz_l, _, _ = g._layouts(block, nb, 1)
    hi = 1 << (2 * ns).bit_length() - 1
    lo = max(2, 2 * ns - hi)
    if lo & (lo - 1) or hi + lo < 2 * ns:
        raise ValueError(f"feed_launcher: 2 NS = {2 * ns} is not the sum of two powers of two")
    descs = (TensorDescriptor.from_tensor(packed, [block, 64], w_l), TensorDescriptor.from_tensor(words, [2, block], sz_l),
             # the block's group codes in two power-of-two boxes (TMA), the largest first
             TensorDescriptor.from_tensor(words, [hi, block], sz_l), TensorDescriptor.from_tensor(words, [lo, block], sz_l),
             TensorDescriptor.from_tensor(xq, [nb, 128], g._wide_layout(4)))
    w = block // 16
    cap = g._ws_regs(nb, True, ns)
    args = (*descs, sx, ck, ci, m, n, nblk, ns)
    meta = dict(NB=nb, STAGES=stages, KCAND=kcand, W=w, PRODUCER_REGS=g.PRODUCER_REGS, FEED=FEEDS[feed],
                **({"maxnreg": cap} if cap else {}))

    def fn():
        _feed_kernel[(nblk,)](*args, num_warps=w, **meta)
    # CTAs an SM: the consumer warps plus the producer partition padded to a warpgroup
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    return fn, resident_ctas(_feed_kernel, x.device, args, {**meta, "num_warps": w}, w + 4) // sms


def launcher(x, packed, words, r, *, n: int, mode: str, stages: int, kcand: int, block: int = 128,
             wide: bool = True):
    """A closure launching the probe kernel on prepared x tiles; returns (fn, candidate keys, indices)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from lowbit.ops.coarse_head import gluon_wgmma as g

    m, ell, nb, nblk, xq, xs, sx, ck, ci = _ring_inputs(x, packed, n, kcand, block, wide)
    w_l, sz_l, x_l, xs_l = g._layouts(block, nb, 1)
    descs = (TensorDescriptor.from_tensor(packed, [block, 64], w_l), TensorDescriptor.from_tensor(words, [2, block], sz_l),
             (TensorDescriptor.from_tensor(xq, [nb, 128], g._wide_layout(4)) if wide
              else TensorDescriptor.from_tensor(xq, [2 * nb, 32], x_l)),
             TensorDescriptor.from_tensor(xs, [4, nb], xs_l))
    w = block // 16
    cap = g._ws_regs(nb, True, ell // 64)

    def fn():
        _probe_kernel[(nblk,)](*descs, sx, r, ck, ci, ck, m, n, nblk, ell // 64, nblk, NB=nb, P=4, STAGES=stages,
                               KCAND=kcand, W=w, PRODUCER_REGS=g.PRODUCER_REGS, MODE=MODES[mode], XW=wide,
                               num_warps=w,
                               **({"maxnreg": cap} if cap else {}))
    return fn, ck, ci


def compile_only(ms, feeds, modes, n: int = 124160, k: int = 5120) -> int:
    """Compile, for sm_90 and without a GPU, every kernel the probe would launch at these M (the
    feeds of ``_feed_kernel``, the modes of ``_probe_kernel`` at 4 slots and kcand 8): the launchers
    run on CPU stand-ins with the kernels recorded (``coarse_wgmma_offline``), then compiled. One
    line each; the count of failures."""
    import types

    import torch

    import lowbit.ops._gluon_resident as resident
    from coarse_wgmma_offline import x_tile_shapes
    from lowbit.ops.coarse_head import x_int8
    from sm90_offline import compile_recorded, record_launches

    ell = k // 4
    packed = torch.empty((n, ell), dtype=torch.uint8)
    words = torch.empty((2 * (ell // 64), n), dtype=torch.int32)

    def run():
        for m in ms:
            x = torch.empty((m, k), dtype=torch.bfloat16)
            for feed in feeds:
                feed_launcher(x, packed, words, n=n, feed=feed)[0]()
            for mode in modes:
                launcher(x, packed, words, torch.empty(n), n=n, mode=mode, stages=4, kcand=8)[0]()

    this = sys.modules[__name__]
    seen = record_launches(run, [(this, "_feed_kernel"), (this, "_probe_kernel")],
                           [(x_int8, "x_int8_tiles", x_tile_shapes), (resident, "resident_ctas", lambda *a, **kw: 0),
                            (torch.cuda, "get_device_properties",
                             lambda device: types.SimpleNamespace(multi_processor_count=132))])
    return compile_recorded(seen, lambda fn, kw: f"{fn.fn.__name__} NB {kw['NB']} FEED {kw.get('FEED')} "
                                                 f"MODE {kw.get('MODE')}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ms", default="1,8,16")
    ap.add_argument("--modes", default="ring,mma,decode,full")
    ap.add_argument("--narrow", action="store_true", help="x in per-plane tiles of 32-byte rows (before X_WIDE)")
    ap.add_argument("--stages", default="4,8")
    ap.add_argument("--kcands", default="8,1")
    ap.add_argument("--head", type=int, default=1, help="also time a fast DraftHead argmax and its selection")
    ap.add_argument("--feeds", default="", help="comma-separated FEEDS to time in ring mode (4 slots, kcand 8): "
                    + ", ".join(FEEDS))
    ap.add_argument("--json", default=None)
    ap.add_argument("--compile-only", action="store_true",
                    help="compile the kernels for sm_90 without a GPU (all FEEDS and MODES at --ms); "
                         "exit 1 on a failure")
    args = ap.parse_args()
    if args.compile_only:
        return 1 if compile_only([int(v) for v in args.ms.split(",")], list(FEEDS), list(MODES)) else 0
    import torch

    from head_bench import K, N, RecordLog, random_head
    from lowbit.bench.timing import copy_bandwidth_gbps, time_us
    from lowbit import DraftHead
    from lowbit.formats import INTx
    from lowbit.ops.coarse_head.gluon_wgmma import coarse_wgmma, wgmma_table
    from lowbit.ops.coarse_head.select import fast_select_rerank
    from lowbit.ops.coarse_head.x_int8 import x_int8_tiles

    log = RecordLog()
    bw = copy_bandwidth_gbps()
    w = random_head()
    f = INTx.quantize(w, bits=2, group_size=64)
    ell = f.packed.shape[1]
    words, r = wgmma_table(f.scale, f.zero, 2, 64, ell)
    floor = (f.packed.numel() + words.numel() * 4) / (bw * 1e3)
    log({"copy_GBps": round(bw), "floor_us": round(floor, 2), "format_floor_us": round(f.nbytes / (bw * 1e3), 2)})
    for m in [int(v) for v in args.ms.split(",")]:
        torch.manual_seed(m)
        x = torch.randn(m, K, device="cuda", dtype=torch.bfloat16)
        nb = max(8, 1 << (m - 1).bit_length())
        kw = dict(n=N, bits=2, block=128, kcand=8, write_logits=False, table_r=r)
        shipped = coarse_wgmma(x, f.packed, words, **kw)
        t = time_us(lambda: coarse_wgmma(x, f.packed, words, **kw), graph=True)
        tp = time_us(lambda: x_int8_tiles(x, ell, 4, nb, perm=True, wide=not args.narrow), graph=True)
        log({"M": m, "variant": "shipped coarse_wgmma (x prep included)", "us": round(t, 2),
             "x_floor": round(t / floor, 3), "x_prep_us": round(tp, 2)})
        if args.head:  # the rest of a fast argmax: selection + exact rerank, and the whole call
            head = DraftHead(w, bits=2, group_size=64, mode="fast")
            head.warmup(max_m=m, ks=(1,))
            ts = time_us(lambda: fast_select_rerank(shipped[0], shipped[2], x, w, head.rerank, 1, 8), graph=True)
            ta = time_us(lambda: head.argmax(x), graph=True)
            log({"M": m, "variant": "fast argmax end to end", "us": round(ta, 2), "x_floor": round(ta / floor, 3),
                 "select_rerank_us": round(ts, 2), "kcand": head.kcand, "rerank": head.rerank})
        for feed in [v for v in args.feeds.split(",") if v]:
            rec = {"M": m, "variant": f"ring feed: {feed}", "stages": 4, "kcand": 8}
            try:
                fn, ctas = feed_launcher(x, f.packed, words, n=N, feed=feed)
                fn()
                torch.cuda.synchronize()
                t = time_us(fn, graph=True)
                log({**rec, "us": round(t, 2), "x_floor": round(t / floor, 3), "ctas_per_sm": ctas})
            except Exception as e:  # noqa: BLE001 - report and go on
                log({**rec, "error": f"{type(e).__name__}: {str(e)[:300]}"})
        for mode in [v for v in args.modes.split(",") if v]:
            for st in [int(v) for v in args.stages.split(",")]:
                for kc in [int(v) for v in args.kcands.split(",")]:
                    rec = {"M": m, "variant": mode, "stages": st, "kcand": kc}
                    try:
                        fn, ck, ci = launcher(x, f.packed, words, r, n=N, mode=mode, stages=st, kcand=kc,
                                              wide=not args.narrow)
                        fn()
                        torch.cuda.synchronize()
                        if mode == "full" and kc == 8:
                            rec["same_candidates"] = bool(torch.equal(ci, shipped[2]) and torch.equal(ck, shipped[0]))
                        t = time_us(fn, graph=True)
                        log({**rec, "us": round(t, 2), "x_floor": round(t / floor, 3)})
                    except Exception as e:  # noqa: BLE001 - report and go on
                        log({**rec, "error": f"{type(e).__name__}: {str(e)[:300]}"})
    log.save(args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
