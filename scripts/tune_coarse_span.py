"""Sweep the int8-wgmma coarse pass's programs spanning two candidate blocks (``gluon_wgmma.SPAN``)
on the H200: span x kernel (warp-specialized or single-partition) x ring slots x register cap
(``--variants all``), or the one-block program's ring depth and register cap (``--variants ring``:
more slots a CTA, or three CTAs an SM at <= 56 registers), for
INT2 (whole-row) and INT4 (per group), coarse pass alone (x preparation included, CUDA-graph
replay, 124160 x 5120 random head, g64, block 128, kcand 8), each variant's candidates checked
against the one-block-a-program launch's (same integer sums, so equal).

    PYTHONPATH=$PWD python3 scripts/tune_coarse_span.py [--ms 48,64] [--bits 2,4] [--json out.json]
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

# (span, ws, stages, maxnreg); None: the module default. The first is the reference launch.
VARIANTS = (
    (1, None, None, None),
    (2, True, None, None),
    (2, True, 3, None),
    (2, True, 5, None),
    (2, True, 4, 88),
    (2, True, 4, 80),
    (2, False, 4, 104),
)
# the one-block program (span 1, the default kernel choice): ring slots, then three CTAs an SM
RING = ((1, None, None, None),) + tuple((1, None, st, None) for st in (2, 3, 5, 6, 8)) + (
    (1, None, 3, 56), (1, None, 4, 56))
# three CTAs an SM (56 registers) with deeper rings, four (40)
RING3 = ((1, None, None, None), (1, None, 5, 56), (1, None, 6, 56), (1, None, 4, 40), (1, None, 3, 40))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ms", default="48,64")
    ap.add_argument("--bits", default="2,4")
    ap.add_argument("--kcands", default="8", help="candidates a block to time (the epilogue's rounds)")
    ap.add_argument("--variants", default="all",
                    help="'all' the VARIANTS, 'default' (span 1 and 2 as shipped), 'ring' (RING) or 'ring3' (RING3)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    chosen = {"all": VARIANTS, "default": VARIANTS[:2], "ring": RING, "ring3": RING3}[args.variants]
    import torch

    from lowbit.bench.timing import copy_bandwidth_gbps
    from lowbit.formats import INTx
    from lowbit.ops.coarse_head.gluon_wgmma import TABLE_BITS, wgmma_sz, wgmma_table

    log = RecordLog()
    bw = copy_bandwidth_gbps()
    w = random_head()
    log({"copy_GBps": round(bw)})
    for bits in [int(b) for b in args.bits.split(",")]:
        f = INTx.quantize(w, bits=bits, group_size=64)
        ell = f.packed.shape[1]
        if bits in TABLE_BITS:
            words, r = wgmma_table(f.scale, f.zero, bits, 64, ell)
        else:
            words, r = wgmma_sz(f.scale, f.zero, bits, 64, ell), None
        floor = f.nbytes / (bw * 1e3)
        for m in [int(v) for v in args.ms.split(",")]:
            torch.manual_seed(m)
            x = torch.randn(m, K, device="cuda", dtype=torch.bfloat16)
            for kcand in [int(v) for v in args.kcands.split(",")]:
                _sweep(log, x, f.packed, words, r, bits, m, kcand, floor, chosen)
    log.save(args.json)
    return 0


def _sweep(log, x, packed, words, r, bits, m, kcand, floor, variants):
    """Time ``variants`` of the coarse pass at one (bits, M, kcand); candidates against the first's."""
    import torch

    from lowbit.bench.timing import time_us
    from lowbit.ops.coarse_head.gluon_wgmma import coarse_wgmma

    base = None
    for span, ws, st, reg in variants:
        kw = dict(n=N, bits=bits, block=128, kcand=kcand, write_logits=False, table_r=r, span=span, ws=ws,
                  stages=st, maxnreg=reg)
        rec = {"bits": bits, "M": m, "kcand": kcand, "span": span, "ws": ws, "stages": st, "maxnreg": reg}
        try:
            out = coarse_wgmma(x, packed, words, **kw)
            torch.cuda.synchronize()
            if base is None:
                base = out
            same = bool(torch.equal(out[0], base[0]) and torch.equal(out[2], base[2]))
            t = time_us(lambda: coarse_wgmma(x, packed, words, **kw), graph=True)
            log({**rec, "us": round(t, 2), "x_floor": round(t / floor, 3), "same_candidates": same})
        except Exception as e:  # noqa: BLE001 - report and go on
            log({**rec, "error": f"{type(e).__name__}: {str(e)[:300]}"})


if __name__ == "__main__":
    raise SystemExit(main())
