"""Sweep the int8-wgmma coarse pass's launch options on the H200 (same run, CUDA-graph replay):
``pipe`` x ``magic`` x ``stages`` x ``block`` x ``chunks`` x ``maxnreg`` x ``table`` (the whole-row
variant, INT2) x ``ws`` x ``persist`` per M, on a 124160 x 5120 head (random rows, g64).

    python3 scripts/tune_coarse_wgmma.py [--json $OUT/tune.json] [--ms 1,4,16,64] [--bits 2,4]

Reports µs of the coarse pass alone (``coarse_wgmma``, including its x preparation launch) and
of the x preparation alone, against the coarse copy's byte floor.
"""
from __future__ import annotations

import argparse
import itertools
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from head_bench import K, N, RecordLog, random_head  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", default=None)
    ap.add_argument("--ms", default="1,4,16,64")
    ap.add_argument("--bits", default="2,4")
    ap.add_argument("--stages", default="2,3,4")
    ap.add_argument("--blocks", default="128,64")
    ap.add_argument("--pipe", default="1,0")
    ap.add_argument("--magic", default="1,0")
    ap.add_argument("--chunks", default="1")
    ap.add_argument("--maxnreg", default="-1", help="-1: the module default (MAXNREG), 0: no cap")
    ap.add_argument("--table", default="0", help="1: the whole-row variant (INT2 only)")
    ap.add_argument("--ws", default="1", help="the whole-row variant warp-specialized (1) or not (0)")
    ap.add_argument("--persist", default="0", help="the warp-specialized kernel persistent (1) or not (0)")
    args = ap.parse_args()
    import torch

    from lowbit.bench.timing import copy_bandwidth_gbps, time_us
    from lowbit.formats import INTx
    from lowbit.ops.coarse_head.gluon_wgmma import TABLE_BITS, coarse_wgmma, wgmma_sz, wgmma_table
    from lowbit.ops.coarse_head.x_int8 import x_int8_tiles

    log = RecordLog()
    bw = copy_bandwidth_gbps()
    w = random_head()
    for bits in [int(v) for v in args.bits.split(",")]:
        f = INTx.quantize(w, bits=bits, group_size=64)
        ell = f.packed.shape[1]
        words = {0: (wgmma_sz(f.scale, f.zero, bits, 64, ell), None)}
        if bits in TABLE_BITS:
            words[1] = wgmma_table(f.scale, f.zero, bits, 64, ell)
        floor = f.nbytes / (bw * 1e3)
        for m in [int(v) for v in args.ms.split(",")]:
            x = torch.randn(m, K, device="cuda", dtype=torch.bfloat16)
            nb = max(8, 1 << (m - 1).bit_length())
            tp = time_us(lambda: x_int8_tiles(x, ell, 8 // bits, nb), graph=True)
            log({"bits": bits, "M": m, "x_prep_us": round(tp, 2), "floor_us": round(floor, 1)})
            ints = lambda s: [int(v) for v in s.split(",")]  # noqa: E731
            for table, ws, persist, block, st, pipe, magic, chunks, reg in itertools.product(
                    [t for t in ints(args.table) if t in words], ints(args.ws), ints(args.persist), ints(args.blocks),
                    ints(args.stages),
                    [bool(v) for v in ints(args.pipe)], [bool(v) for v in ints(args.magic)], ints(args.chunks),
                    ints(args.maxnreg)):
                if table and (pipe or magic) or (ws and (not table or chunks != 1)):
                    continue  # the whole-row variant has neither; the warp-specialized one is whole-row, 1 chunk
                if persist and not ws:
                    continue  # only the warp-specialized kernel persists
                if not table and ws != int(args.ws.split(",")[0]):
                    continue  # the per-group variant once
                sz, r = words[table]
                kw = dict(n=N, bits=bits, block=block, kcand=8, write_logits=False, table_r=r, stages=st, pipe=pipe,
                          magic=magic, chunks=chunks, maxnreg=reg if reg >= 0 else None, ws=bool(ws),
                          persist=bool(persist))
                rec = {"bits": bits, "M": m, "table": table, "ws": ws if table else 0, "persist": persist, "block": block,
                       "stages": st, "pipe": pipe,
                       "magic": magic, "chunks": chunks, "maxnreg": reg}
                try:
                    coarse_wgmma(x, f.packed, sz, **kw)
                    t = time_us(lambda: coarse_wgmma(x, f.packed, sz, **kw), graph=True)
                    log({**rec, "us": round(t, 1), "x_floor": round(t / floor, 2)})
                except Exception as e:  # noqa: BLE001 - report and go on
                    log({**rec, "error": f"{type(e).__name__}: {str(e)[:300]}"})
    log.save(args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
