"""How fast can random rows of a packed table be read, by the size of the contiguous piece one
program reads and by the order the pieces come in? Bounds the large-grid NVFP4 gathered kernel
(``lowbit/ops/gathered/triton_mma.py``), whose warps read 64-byte pieces of each row.

A program reads ``ROWS`` gathered rows' words ``[piece * PW, (piece + 1) * PW)`` (int32) and
stores their XOR (so no load is dropped). ``order``: "tile" runs the programs of one piece over
all row tiles first (a row's pieces far apart in time), "row" the pieces of one row tile first.
Prints GB/s of the rows' bytes against the device-to-device copy bandwidth, same run.

    python3 scripts/probe_gather_bandwidth.py [--rows 16384]
"""
from __future__ import annotations

import sys

import torch
import triton
import triton.language as tl

from lowbit.bench.timing import copy_bandwidth_gbps, time_us

V = 131072


@triton.jit
def _gather_read(p_w, p_idx, p_out, n_tiles, s_wn, PW: tl.constexpr, PIECES: tl.constexpr, ROWS: tl.constexpr,
                 ROW_ORDER: tl.constexpr):
    pid = tl.program_id(0)
    if ROW_ORDER:
        tile = pid // PIECES
        piece = pid % PIECES
    else:
        tile = pid % n_tiles
        piece = pid // n_tiles
    o_r = tile * ROWS + tl.arange(0, ROWS)
    rows = tl.load(p_idx + o_r).to(tl.int64)
    words = tl.load(p_w + rows[:, None] * s_wn + piece * PW + tl.arange(0, PW)[None, :])
    tl.store(p_out + pid, tl.xor_sum(tl.reshape(words, [ROWS * PW]), 0))


def main():
    n_rows = int(sys.argv[sys.argv.index("--rows") + 1]) if "--rows" in sys.argv else 16384
    bw = copy_bandwidth_gbps()
    print(f"copy {bw:.0f} GB/s; {n_rows} random rows of {V}", flush=True)
    for k in (1024, 4096):
        row_words = k // 8  # packed NVFP4: K / 2 bytes a row
        table = torch.randint(-2**31, 2**31 - 1, (V, row_words), device="cuda", dtype=torch.int32)
        idxs = [torch.randint(0, V, (n_rows,), device="cuda", dtype=torch.int32) for _ in range(8)]
        nbytes = n_rows * row_words * 4
        for pw in (16, 64, row_words):
            for rows in (8, 32):
                for order in (False, True):
                    pieces = row_words // pw
                    n_tiles = n_rows // rows
                    out = torch.empty(n_tiles * pieces, device="cuda", dtype=torch.int32)
                    state = {"i": 0}

                    def run():
                        state["i"] = (state["i"] + 1) % len(idxs)
                        _gather_read[(n_tiles * pieces,)](table, idxs[state["i"]], out, n_tiles, row_words, PW=pw,
                                                          PIECES=pieces, ROWS=rows, ROW_ORDER=order,
                                                          num_warps=4)

                    us = time_us(run, graph=True, rep=30)
                    print(f"K{k:5d} piece {pw * 4:5d} B  rows/program {rows:3d}  order {'row ' if order else 'tile'}  "
                          f"{us:7.2f} us  {nbytes / us / 1e3:6.0f} GB/s  ({nbytes / us / 1e3 / bw:4.2f} of copy)",
                          flush=True)
        del table
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
