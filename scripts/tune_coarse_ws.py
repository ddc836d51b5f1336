"""Sweep the INT2 fast path's launch options on the H200 (same run, CUDA-graph replay, 124160 x 5120
random head, g64): the warp-specialized whole-row coarse pass (``gluon_wgmma.coarse_wgmma``, x
preparation included) over chunks a stage x ring slots x register cap x PDL x x layout x
persistent launch, then the selection + rerank (``select.fast_select_rerank``) over the selection
program's warps x PDL, then ``DraftHead.argmax`` end to end with the module defaults.

    PYTHONPATH=$PWD python3 scripts/tune_coarse_ws.py [--ms 1,8,16,32] [--json out.json]

Each coarse variant's candidates are checked against the default's (same integer sums, so equal).
"""
from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from head_bench import K, N, RecordLog, random_head  # noqa: E402

# (chunks, stages, maxnreg, pdl, wide, persist); None: the module default
COARSE = (
    (None, None, None, None, None, None),
    (1, None, None, True, True, False),
    (1, None, 64, True, True, True),
    (1, None, 72, True, True, True),
    (1, None, 80, True, True, True),
    (1, None, 96, True, True, True),
    (1, 5, 80, True, True, True),
    (1, 2, 80, True, True, True),
    (2, 2, 80, True, True, True),
)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ms", default="1,8,16,32")
    ap.add_argument("--coarse", default="all", help="'all' the COARSE variants, or 'default' only")
    ap.add_argument("--warps", default="1,2,4,8", help="selection program warps to time")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    import torch

    from lowbit import DraftHead
    from lowbit.bench.timing import copy_bandwidth_gbps, time_us
    from lowbit.formats import INTx
    from lowbit.ops.coarse_head import select
    from lowbit.ops.coarse_head.gluon_wgmma import coarse_wgmma, wgmma_table

    log = RecordLog()
    bw = copy_bandwidth_gbps()
    w = random_head()
    f = INTx.quantize(w, bits=2, group_size=64)
    ell = f.packed.shape[1]
    words, r = wgmma_table(f.scale, f.zero, 2, 64, ell)
    floor = f.nbytes / (bw * 1e3)
    log({"copy_GBps": round(bw), "floor_us": round(floor, 2)})
    for m in [int(v) for v in args.ms.split(",")]:
        torch.manual_seed(m)
        x = torch.randn(m, K, device="cuda", dtype=torch.bfloat16)
        base = None
        for ch, st, reg, pdl, wide, persist in (COARSE if args.coarse == "all" else COARSE[:1]):
            kw = dict(n=N, bits=2, block=128, kcand=8, write_logits=False, table_r=r, ws=True, chunks=ch, stages=st,
                      maxnreg=reg, pdl=pdl, wide=wide, persist=persist)
            rec = {"M": m, "part": "coarse", "chunks": ch, "stages": st, "maxnreg": reg, "pdl": pdl, "wide": wide,
                   "persist": persist}
            try:
                out = coarse_wgmma(x, f.packed, words, **kw)
                torch.cuda.synchronize()
                if base is None:
                    base = out
                same = bool(torch.equal(out[0], base[0]) and torch.equal(out[2], base[2]))
                t = time_us(lambda: coarse_wgmma(x, f.packed, words, **kw), graph=True)
                log({**rec, "us": round(t, 2), "x_floor": round(t / floor, 3), "same_candidates": same})
            except Exception as e:  # noqa: BLE001 - report and go on
                log({**rec, "error": f"{type(e).__name__}: {str(e)[:300]}"})
        ck, ci = base[0], base[2]
        default_select = (select.SELECT_WARPS, select.PDL)
        want = None
        for warps in [int(v) for v in args.warps.split(",")]:
            for pdl in (True, False):
                select.SELECT_WARPS, select.PDL = warps, pdl
                v, i = select.fast_select_rerank(ck, ci, x, w, 32, 1, 8)
                want = i if want is None else want
                t = time_us(lambda: select.fast_select_rerank(ck, ci, x, w, 32, 1, 8), graph=True)
                log({"M": m, "part": "select+rerank", "warps": warps, "pdl": pdl, "us": round(t, 2),
                     "same": bool(torch.equal(i, want))})
        select.SELECT_WARPS, select.PDL = default_select
        head = DraftHead(w, bits=2, group_size=64, mode="fast")
        head.warmup(max_m=m, ks=(1,))
        t = time_us(lambda: head.argmax(x), graph=True)
        log({"M": m, "part": "fast argmax end to end (defaults)", "us": round(t, 2), "x_floor": round(t / floor, 3)})
    log.save(args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
