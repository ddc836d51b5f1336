"""What the INT2 coarse pass's TMA stream costs by geometry: a warp-specialized read-only kernel
(a 1-warp producer issuing each stage's TMAs into a ring, consumers that only wait for a stage and
hand its slot back) over the whole-row pass's operands, with the geometry varied.

    PYTHONPATH=$PWD python3 scripts/probe_coarse_stream.py [--nb 8] [--json out.json]

Knobs per variant: rows a CTA (``block``: 128 = 8 consumer warps, 64 = 4), the codes box width
(``box``: 64 or 128 packed bytes a row a stage), which operands a stage brings (``words``: the
table words; ``xt``: the P x tiles of NB rows), ring depth, a persistent grid (``per_sm`` CTAs
an SM looping over the row blocks, the producer running on into the next block), and the
register cap (which sets the CTAs an SM: 64 -> 2 of 384 threads, 40 -> 4). Reported: µs (median
CUDA-graph replay), x the byte floor of the codes + words at the measured copy bandwidth (the
``probe_coarse_ring.py`` floor), the CTAs an SM, and a flat Triton read of the same bytes.
"""
from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma  # noqa: E402

from lowbit.ops._gluon_wgmma import invalidate_ring_barriers, ring_barriers  # noqa: E402


@gluon.jit
def _stream_consumer(ready, empty, out_ptr, NBLK, NS, GRID, STAGES: gl.constexpr):
    c = 0
    for blk in range(gl.program_id(0), NBLK, GRID):
        for i in range(0, NS):
            slot = c % STAGES
            mbarrier.wait(ready.index(slot), (c // STAGES) & 1)
            gl.thread_barrier()
            mbarrier.arrive(empty.index(slot))
            c += 1
    gl.store(out_ptr + gl.program_id(0), c)


@gluon.jit
def _stream_producer(w_desc, sz_desc, x_desc, w_bufs, sz_bufs, x_bufs, ready, empty, NBLK, NS, GRID,
                     STAGES: gl.constexpr, P: gl.constexpr, NB: gl.constexpr, R: gl.constexpr, CH: gl.constexpr,
                     WORDS: gl.constexpr, XT: gl.constexpr):
    nbytes: gl.constexpr = (w_desc.block_type.nbytes + (sz_desc.block_type.nbytes if WORDS else 0)
                            + (CH * P * x_desc.block_type.nbytes if XT else 0))
    c = 0
    for blk in range(gl.program_id(0), NBLK, GRID):
        for i in range(0, NS):
            slot = c % STAGES
            bar = ready.index(slot)
            mbarrier.wait(empty.index(slot), ((c // STAGES) & 1) ^ 1)
            mbarrier.expect(bar, nbytes)
            tma.async_copy_global_to_shared(w_desc, [blk * R, i * (64 * CH)], bar, w_bufs.index(slot))
            if WORDS:
                tma.async_copy_global_to_shared(sz_desc, [blk * R, i * (4 * CH)], bar, sz_bufs.index(slot))
            if XT:
                for ch in gl.static_range(CH):
                    for j in gl.static_range(P):
                        tma.async_copy_global_to_shared(x_desc, [((i * CH + ch) * P + j) * 2 * NB, 0], bar,
                                                        x_bufs.index((slot * CH + ch) * P + j))
            c += 1


@gluon.jit(do_not_specialize=["NBLK", "NS", "GRID"])
def _stream_kernel(w_desc, sz_desc, x_desc, out_ptr, NBLK, NS, GRID, NB: gl.constexpr, P: gl.constexpr,
                   STAGES: gl.constexpr, W: gl.constexpr, CH: gl.constexpr, WORDS: gl.constexpr, XT: gl.constexpr,
                   PRODUCER_REGS: gl.constexpr):
    R: gl.constexpr = 16 * W
    w_bufs = gl.allocate_shared_memory(gl.uint8, [STAGES, R, 64 * CH], w_desc.layout)
    sz_bufs = gl.allocate_shared_memory(gl.int32, [STAGES, R, 4 * CH], sz_desc.layout)
    x_bufs = gl.allocate_shared_memory(gl.int8, [STAGES * CH * P, 2 * NB, 32], x_desc.layout)
    ready, empty, side = ring_barriers(STAGES)  # side: unused here
    gl.warp_specialize([
        (_stream_consumer, (ready, empty, out_ptr, NBLK, NS, GRID, STAGES)),
        (_stream_producer, (w_desc, sz_desc, x_desc, w_bufs, sz_bufs, x_bufs, ready, empty, NBLK, NS, GRID, STAGES, P,
                            NB, R, CH, WORDS, XT)),
    ], [1], [PRODUCER_REGS])
    invalidate_ring_barriers(ready, empty, side, STAGES)


@triton.jit
def _flat_read_kernel(src_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """XOR-fold BLOCK int32 words a program (a flat streaming read of the same bytes)."""
    pid = tl.program_id(0)
    o = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(src_ptr + o, mask=o < n, other=0, cache_modifier=".cg")
    tl.store(out_ptr + pid, tl.reduce(v, 0, _xor))


@triton.jit
def _xor(a, b):
    return a ^ b


# (name, block, box, words, xt, stages, per_sm (0: one block a program), maxnreg)
VARIANTS = (
    ("shipped geometry", 128, 64, 1, 1, 4, 0, 64),
    ("codes only", 128, 64, 0, 0, 4, 0, 64),
    ("codes + words", 128, 64, 1, 0, 4, 0, 64),
    ("box 128", 128, 128, 1, 1, 4, 0, 64),
    ("box 128, codes only", 128, 128, 0, 0, 4, 0, 64),
    ("4 CTAs an SM", 128, 64, 1, 1, 4, 0, 40),
    ("block 64", 64, 64, 1, 1, 4, 0, 64),
    ("block 64, 6 CTAs an SM", 64, 64, 1, 1, 4, 0, 40),
    ("persistent 2 an SM", 128, 64, 1, 1, 4, 2, 64),
    ("persistent 4 an SM", 128, 64, 1, 1, 4, 4, 40),
    ("persistent 1 an SM, 8 slots", 128, 64, 1, 1, 8, 1, 64),
    ("box 128, persistent 2 an SM", 128, 128, 1, 1, 4, 2, 64),
)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nb", default="8")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    import torch
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from head_bench import K, N, RecordLog
    from lowbit._backend import sm_count
    from lowbit.bench.timing import copy_bandwidth_gbps, time_us
    from lowbit.ops._gluon_resident import resident_ctas

    log = RecordLog()
    bw = copy_bandwidth_gbps()
    ell = K // 4
    ns64 = ell // 64
    torch.manual_seed(0)
    packed = torch.randint(0, 256, (N, ell), dtype=torch.uint8, device="cuda")
    words = torch.randint(-2**31, 2**31 - 1, (N, ns64 * 4), dtype=torch.int32, device="cuda")
    floor = (packed.numel() + 4 * words.numel()) / (bw * 1e3)
    flat = torch.cat([packed.view(torch.int32).view(-1), words.view(-1)])
    blk = 8192
    fo = torch.empty(triton.cdiv(flat.numel(), blk), dtype=torch.int32, device="cuda")
    t = time_us(lambda: _flat_read_kernel[(fo.numel(),)](flat, fo, flat.numel(), BLOCK=blk, num_warps=8), graph=True)
    log({"variant": "flat Triton read of codes + words", "us": round(t, 2), "x_floor": round(t / floor, 3),
         "floor_us": round(floor, 2), "copy_GBps": round(bw)})
    sms = sm_count(packed.device, interpret=2)
    for nb in [int(v) for v in args.nb.split(",")]:
        xq = torch.randint(-127, 128, (ns64 * 4 * 2 * nb, 32), dtype=torch.int8, device="cuda")
        for name, block, box, use_words, use_xt, stages, per_sm, cap in VARIANTS:
            ch = box // 64
            w = block // 16
            nblk = -(-N // block)
            grid = min(nblk, per_sm * sms) if per_sm else nblk
            descs = (TensorDescriptor.from_tensor(packed, [block, box], gl.NVMMASharedLayout.get_default_for(
                         [block, box], gl.uint8)),
                     TensorDescriptor.from_tensor(words, [block, 4 * ch], gl.NVMMASharedLayout(
                         swizzle_byte_width=0, element_bitwidth=32, rank=2)),
                     TensorDescriptor.from_tensor(xq, [2 * nb, 32], gl.NVMMASharedLayout(
                         swizzle_byte_width=32, element_bitwidth=8, rank=2)))
            out = torch.empty(grid, dtype=torch.int32, device="cuda")
            meta = dict(NB=nb, P=4, STAGES=stages, W=w, CH=ch, WORDS=bool(use_words), XT=bool(use_xt),
                        PRODUCER_REGS=40, num_warps=w, maxnreg=cap)
            rec = {"nb": nb, "variant": name, "block": block, "box": box, "words": use_words, "xt": use_xt,
                   "stages": stages, "grid": grid, "maxnreg": cap}
            try:
                fn = lambda: _stream_kernel[(grid,)](*descs, out, nblk, ns64 // ch, grid, **meta)  # noqa: E731
                fn()
                torch.cuda.synchronize()
                ok = int(out.sum().item()) == nblk * (ns64 // ch)
                # the variant as launched (its num_warps), and its threads: the W consumer warps and
                # the producer's partition, which takes a whole warpgroup (384 threads at W = 8)
                res = resident_ctas(_stream_kernel, packed.device, (*descs, out, nblk, ns64 // ch, grid), meta,
                                    w + 4)
                t = time_us(fn, graph=True)
                log({**rec, "us": round(t, 2), "x_floor": round(t / floor, 3), "ctas_per_sm": res // sms,
                     "all_stages_seen": ok})
            except Exception as e:  # noqa: BLE001 - report and go on
                log({**rec, "error": f"{type(e).__name__}: {str(e)[:300]}"})
    log.save(args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
