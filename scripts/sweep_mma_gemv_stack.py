"""Sweep ``mma_gemv``'s (RT, W) configs and launch variants in the layer-stack timer (#9: fp8_gemm
within 1.3x of the byte floor at decode M), on the H200, in one run.

    python3 scripts/sweep_mma_gemv_stack.py [--shapes 24576x1536,4096x7168] [--ms 1,8]
        [--configs 1x2,1x4,1x8,2x4,2x8,1x16] [--variants plain,pdl_notrig,o1pdl] [--json FILE]

FP8 weights (``mma_gemv`` serves fp8_gemm at M <= 8). Per (N, K, M): the byte floor, the shipped
dispatch (``fp8_gemm``: picked config, short-launch rule) and every config x variant timed with
``lowbit.bench.gemm.stack_us`` (8 distinct weights back to back in one CUDA graph after an L2
flush, µs per call). Variants force ``triton_mma``'s switches: ``plain`` (no PDL, Triton's -O3),
``pdl`` (programmatic dependent launch + early trigger), ``pdl_notrig`` (PDL, trigger at exit),
``o1`` (ptxas -O1), ``o1pdl`` (both). The twenty-second session's run also had ``plain_d2`` /
``o1pdl_d2`` (two K blocks in flight ahead, a kernel switch measured slower and removed; commit
82b86bc). Prints the best per shape and its ratio to the floor.
"""
from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from head_bench import RecordLog  # noqa: E402

from bench_gemm_stack import MMA_GEMV_LAUNCH  # noqa: E402

# the launch variants (``pdl`` keeps the module's TRIGGER = True), plus PDL with the trigger at exit
VARIANTS = {**MMA_GEMV_LAUNCH, "pdl_notrig": {"PDL": True, "TRIGGER": False, "PTXAS_OPTIONS": ""}}
DEFAULT_VARIANTS = "plain,pdl_notrig,o1pdl"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default="24576x1536,4096x7168")
    ap.add_argument("--ms", default="1,8")
    ap.add_argument("--configs", default="1x2,1x4,1x8,2x4,2x8,1x16")
    ap.add_argument("--variants", default=DEFAULT_VARIANTS)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    unknown = [v for v in args.variants.split(",") if v not in VARIANTS]
    if unknown:
        ap.error(f"unknown variants {unknown} (known: {', '.join(VARIANTS)})")
    import torch

    from lowbit.bench.flags import module_flags
    from lowbit.bench.gemm import decode_layers, gemm_bytes, stack_us
    from lowbit.bench.timing import copy_bandwidth_gbps
    from lowbit.ops.fp8_gemm import fp8_gemm, triton_mma
    from lowbit.ops.fp8_gemm.triton_mma import mma_gemv, pick_mma_config

    bw = copy_bandwidth_gbps()
    log = RecordLog()
    log({"copy_gbps": round(bw, 1), "layers": args.layers})
    for shape in args.shapes.split(","):
        n, k = map(int, shape.split("x"))
        for m in map(int, args.ms.split(",")):
            layers = decode_layers(m, n, k, False, args.layers)
            floor = gemm_bytes(m, n, k, False) / (bw * 1e3)
            shipped = stack_us([lambda a=a, w=w: fp8_gemm(a.data, a.scale, w.data, w.scale) for a, w, _, _ in layers])
            rec = {"N": n, "K": k, "M": m, "floor_us": round(floor, 2), "picked": "x".join(map(str, pick_mma_config(n, k, m, False))),
                   "shipped_us": round(shipped, 2), "shipped_x_floor": round(shipped / floor, 3)}
            best = ("shipped", shipped)
            for cfg in args.configs.split(","):
                rt, w_ = map(int, cfg.split("x"))
                for v in args.variants.split(","):
                    fns = [lambda a=a, w=w: mma_gemv(a.data, a.scale, w.data, w.scale, fp4=False, config=(rt, w_))
                           for a, w, _, _ in layers]
                    with module_flags(triton_mma, VARIANTS[v]):
                        try:
                            us = stack_us(fns)
                        except Exception as e:  # noqa: BLE001 - a config that cannot launch is reported
                            rec[f"{cfg}_{v}"] = f"{type(e).__name__}: {str(e)[:120]}"
                            continue
                    rec[f"{cfg}_{v}"] = round(us, 2)
                    if us < best[1]:
                        best = (f"{cfg}_{v}", us)
            rec.update(best=best[0], best_us=round(best[1], 2), best_x_floor=round(best[1] / floor, 3),
                       target_us=round(1.3 * floor, 2))
            log(rec)
            del layers
            torch.cuda.empty_cache()
    log.save(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
