"""The draft head's fast mode at M = 17..64 on the H200: band kernels vs the tensor-core pass in
launches of 16 or 32 rows (two / four 8-column B tiles reading the codes once).

    python3 scripts/bench_coarse_wide_m.py [--json $OUT/wide_m.json] [--ms 32,64] [--bits 2,4,8]

124160 x 5120 bf16 head (random N(0, 0.02) rows), g64, block 128. Variants: ``band``
(``coarse_head.MMA_MAX_M`` = 16: rows past 16 on the band kernels, the default before), ``tc16``
and ``tc32`` (``MMA_MAX_M`` = 64 with ``triton_mma.MAX_M`` = 16 / 32). Per (bits, M, variant):
fast ``argmax`` end to end and the coarse pass alone (CUDA-graph replay), cuBLAS bf16 + argmax in
the same run, and whether the tensor-core variants' logits are bit-identical.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

VARIANTS = {"band": (16, 16), "tc16": (64, 16), "tc32": (64, 32)}  # name -> (MMA_MAX_M, MAX_M)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", default=None)
    ap.add_argument("--ms", default="32,64")
    ap.add_argument("--bits", default="2,4,8")
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F

    import lowbit.ops.coarse_head as ch
    from lowbit import DraftHead
    from lowbit.bench.timing import copy_bandwidth_gbps, time_us
    from lowbit.ops.coarse_head import BOUND_NONE, coarse_head
    from lowbit.ops.coarse_head import triton_mma as tm

    defaults = (ch.MMA_MAX_M, tm.MAX_M)
    n, k = 124160, 5120
    torch.manual_seed(0)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
    bw = copy_bandwidth_gbps()
    rows = []

    def log(rec):
        rows.append(rec)
        print(json.dumps(rec), flush=True)

    log({"copy_gbps": round(bw, 1)})
    heads = {b: DraftHead(w, bits=b, mode="fast") for b in [int(v) for v in args.bits.split(",")]}
    for m in [int(v) for v in args.ms.split(",")]:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        t_lin = time_us(lambda: F.linear(x, w).argmax(-1), graph=True)
        log({"M": m, "impl": "cuBLAS bf16 + argmax", "us": round(t_lin, 1)})
        for bits, h in heads.items():
            p = h._ensure_packed()
            floor = p.nbytes / (bw * 1e3)
            ref = None
            for name, (mma_max, max_m) in VARIANTS.items():
                ch.MMA_MAX_M, tm.MAX_M = mma_max, max_m
                try:
                    out = coarse_head(x, p, block=128, kcand=h.kcand, bound=BOUND_NONE, write_logits=True)
                    same = None
                    if name != "band":
                        same = True if ref is None else bool(torch.equal(out.logits, ref))
                        ref = out.logits if ref is None else ref
                    h.argmax(x)  # compiles whatever this M needs outside the graph capture
                    torch.cuda.synchronize()
                    tc = time_us(lambda: coarse_head(x, p, block=128, kcand=h.kcand, bound=BOUND_NONE), graph=True)
                    ta = time_us(lambda: h.argmax(x), graph=True)
                    log({"M": m, "bits": bits, "variant": name, "coarse_us": round(tc, 1), "argmax_us": round(ta, 1),
                         "floor_us": round(floor, 1), "speedup_vs_bf16": round(t_lin / ta, 2),
                         "tc_logits_identical": same})
                except Exception as e:  # noqa: BLE001 - report and go on
                    log({"M": m, "bits": bits, "variant": name, "error": f"{type(e).__name__}: {str(e)[:300]}"})
    ch.MMA_MAX_M, tm.MAX_M = defaults
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
