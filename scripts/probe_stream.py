"""What the coarse GEMV's access pattern alone costs on the GPU: a read-only probe.

    PYTHONPATH=$PWD python3 scripts/probe_stream.py [--out probe.jsonl]

Streams the INT2 coarse copy of a 124160 x 5120 head ([N, 1280] bytes, 190 MB) the way the
packed-half GEMV does — one program per 128 rows, 64 bytes per row per K step — but only
XOR-reduces the words, so the time is the memory side's ceiling for that tiling. Layouts: one
thread per row ([128, 4, 4] tile), four threads per row ([128, 16] tile), and a flat contiguous
read of the same bytes; each with and without ``.cg``. Times: median CUDA-graph replay
(``lowbit.bench.timing.time_us(graph=True)``).
"""
from __future__ import annotations

import argparse
import json

import torch
import triton
import triton.language as tl

from lowbit.bench.timing import time_us


@triton.jit
def _probe_kernel(w_ptr, out_ptr, N, stride_wn, LW: tl.constexpr, BN: tl.constexpr, LAYOUT: tl.constexpr,
                  CG: tl.constexpr):
    i_n = tl.program_id(0).to(tl.int64)
    o_n = i_n * BN + tl.arange(0, BN)
    m_n = o_n < N
    if LAYOUT == 0:  # one thread per row
        o_w = 4 * tl.arange(0, 4)[None, :, None] + tl.arange(0, 4)[None, None, :]
        p = w_ptr + o_n[:, None, None] * stride_wn + o_w
        m = m_n[:, None, None]
        acc = tl.zeros([BN, 4, 4], dtype=tl.int32)
    else:  # four threads per row
        o_w = tl.arange(0, 16)[None, :]
        p = w_ptr + o_n[:, None] * stride_wn + o_w
        m = m_n[:, None]
        acc = tl.zeros([BN, 16], dtype=tl.int32)
    for j0 in range(0, LW, 16):
        if CG:
            acc ^= tl.load(p + j0, mask=m, other=0, cache_modifier=".cg")
        else:
            acc ^= tl.load(p + j0, mask=m, other=0)
    if LAYOUT == 0:
        r = tl.xor_sum(tl.xor_sum(acc, axis=2), axis=1)
    else:
        r = tl.xor_sum(acc, axis=1)
    tl.store(out_ptr + o_n, r, mask=m_n)


@triton.jit
def _flat_kernel(w_ptr, out_ptr, total, BLOCK: tl.constexpr, ITERS: tl.constexpr):
    i = tl.program_id(0).to(tl.int64)
    acc = tl.zeros([BLOCK], dtype=tl.int32)
    for t in range(ITERS):
        o = (i * ITERS + t) * BLOCK + tl.arange(0, BLOCK)
        acc ^= tl.load(w_ptr + o, mask=o < total, other=0)
    tl.store(out_ptr + i, tl.xor_sum(acc, axis=0))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    n, lw = 124160, 320
    w = torch.randint(-2**31, 2**31 - 1, (n, lw), dtype=torch.int32, device="cuda")
    out = torch.empty(n, dtype=torch.int32, device="cuda")
    nbytes = w.numel() * 4
    rows = []
    for layout in (0, 1):
        for cg in (True, False):
            for warps in (1, 2, 4, 8):
                def fn():
                    _probe_kernel[(triton.cdiv(n, 128),)](w, out, n, w.stride(0), LW=lw, BN=128, LAYOUT=layout, CG=cg,
                                                          num_warps=warps)
                us = time_us(fn, graph=True)
                rows.append({"layout": ["thread/row", "4 threads/row"][layout], "cg": cg, "warps": warps,
                             "us": round(us, 1), "GBps": round(nbytes / us / 1e3)})
                print(json.dumps(rows[-1]), flush=True)
    block, iters = 1024, 16
    grid = triton.cdiv(w.numel(), block * iters)
    flat = torch.empty(grid, dtype=torch.int32, device="cuda")
    us = time_us(lambda: _flat_kernel[(grid,)](w, flat, w.numel(), BLOCK=block, ITERS=iters, num_warps=4), graph=True)
    rows.append({"layout": "flat", "us": round(us, 1), "GBps": round(nbytes / us / 1e3)})
    print(json.dumps(rows[-1]), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
