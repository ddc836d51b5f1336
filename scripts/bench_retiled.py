"""Time the draft head's fast mode on its coarse paths (the wide packed-half GEMV / band kernels
and the tensor-core MMA pass) on the H200. (The name is historical: the re-tiled GEMV it first
compared, measured in docs/measurements/2026-12-01_bench_retiled_round*.json, was dropped.)

    python3 scripts/bench_retiled.py [--json $OUT/retiled.json] [--ms 1,2,3,4]

124160 x 5120 bf16 head (random N(0, 0.02) rows), g64, block 128. Per bits (2 / 4 / 8) and M:
``DraftHead.argmax`` in fast mode by CUDA-graph replay on each path (``coarse_head.MMA_MAX_M``
0 or 16), the coarse pass alone for each, cuBLAS bf16 + argmax as the baseline, and whether the
argmax agrees between paths. Floors: the coarse copy's
bytes (codes + fp16 scale + uint8 zero) at the measured copy bandwidth.
"""
from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from head_bench import K, RecordLog, random_head  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", default=None)
    ap.add_argument("--ms", default="1,2,4,8,16")
    ap.add_argument("--bits", default="2,4,8")
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F

    import lowbit.ops.coarse_head as ch
    from lowbit import DraftHead
    from lowbit.bench.timing import copy_bandwidth_gbps, time_us
    from lowbit.ops.coarse_head import BOUND_NONE, coarse_head

    k = K
    w = random_head()
    bw = copy_bandwidth_gbps()
    log = RecordLog()

    log({"copy_gbps": round(bw, 1)})
    heads = {b: DraftHead(w, bits=b, mode="fast") for b in [int(v) for v in args.bits.split(",")]}
    for bits, h in heads.items():
        h.warmup(max_m=16)
    for m in [int(v) for v in args.ms.split(",")]:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        t_lin = time_us(lambda: F.linear(x, w).argmax(-1), graph=True)
        log({"M": m, "impl": "cuBLAS bf16 + argmax", "us": round(t_lin, 1)})
        for bits, h in heads.items():
            p = h._ensure_packed()
            floor = p.nbytes / (bw * 1e3)
            results = {}
            for name, mma_m in (("wide/band", 0), ("tensor-core mma (triton_mma)", 16)):
                ch.MMA_MAX_M = mma_m
                try:
                    results[name] = h.argmax(x)
                    ta = time_us(lambda: h.argmax(x), graph=True)
                    tc = time_us(lambda: coarse_head(x, p, block=128, kcand=h.kcand, bound=BOUND_NONE), graph=True)
                    log({"M": m, "bits": bits, "impl": name, "argmax_us": round(ta, 1), "coarse_us": round(tc, 1),
                         "floor_us": round(floor, 1), "x_floor": round(ta / floor, 2),
                         "speedup_vs_bf16": round(t_lin / ta, 2)})
                except Exception as e:  # noqa: BLE001 - report and go on
                    log({"M": m, "bits": bits, "impl": name, "error": f"{type(e).__name__}: {str(e)[:300]}"})
            vals = list(results.values())
            log({"M": m, "bits": bits, "argmax_agree": all(torch.equal(v, vals[0]) for v in vals)})
    ch.MMA_MAX_M = 16  # the default
    log.save(args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
