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
    fence_async_shared,
    mbarrier,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from lowbit.ops._gluon_wgmma import acc_layout  # noqa: E402
from lowbit.ops.coarse_head.gluon_wgmma import (  # noqa: E402
    _codes_layout,
    _emit_candidates,
    _chunk_tables,
    _prmt_word,
    _stage_sum_table,
    _ws_producer,
    _x_tile,
)

MODES = {"ring": 0, "mma": 1, "full": 2, "decode": 3}


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
    _emit_candidates(out, row0, blk, ck_ptr, ci_ptr, lg_ptr, M, N, NBLK, NB, W, KCAND, False)


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
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=1)
    fence_async_shared()
    gl.warp_specialize([
        (_probe_consumer, (w_bufs, code_rows, xt_bufs, ready, empty, sx_ptr, r_ptr, ck_ptr, ci_ptr, lg_ptr, M, N, NBLK,
                           NS, NB, P, STAGES, KCAND, W, MODE, XW)),
        (_ws_producer, (w_desc, sz_desc, x_desc, xs_desc, w_bufs, sz_bufs, x_bufs, xs_bufs, ready, empty, NBLK,
                              NS, GRID, STAGES, P, NB, R, XW)),
    ], [1], [PRODUCER_REGS])
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(i))
        mbarrier.invalidate(empty.index(i))


def launcher(x, packed, words, r, *, n: int, mode: str, stages: int, kcand: int, block: int = 128,
             wide: bool = True):
    """A closure launching the probe kernel on prepared x tiles; returns (fn, candidate keys, indices)."""
    import torch
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from lowbit.ops.coarse_head import gluon_wgmma as g
    from lowbit.ops.coarse_head.x_int8 import x_int8_tiles

    m = x.shape[0]
    ell = packed.shape[1]
    nb = max(8, 1 << (m - 1).bit_length())
    xq, xs, sx = x_int8_tiles(x, ell, 4, nb, perm=True, wide=wide)
    nblk = -(-n // block)
    ck = torch.empty(m, nblk * kcand, device=x.device)
    ci = torch.empty(m, nblk * kcand, device=x.device, dtype=torch.int64)
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ms", default="1,8,16")
    ap.add_argument("--modes", default="ring,mma,decode,full")
    ap.add_argument("--narrow", action="store_true", help="x in per-plane tiles of 32-byte rows (before X_WIDE)")
    ap.add_argument("--stages", default="4,8")
    ap.add_argument("--kcands", default="8,1")
    ap.add_argument("--head", type=int, default=1, help="also time a fast DraftHead argmax and its selection")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
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
        for mode in args.modes.split(","):
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
