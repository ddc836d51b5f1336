"""Sweep ``mma_gemv``'s (RT, W) configs and launch variants in the layer-stack timer (#9: fp8_gemm
within 1.3x of the byte floor at decode M), on the H200, in one run.

    python3 scripts/sweep_mma_gemv_stack.py [--shapes 24576x1536,4096x7168] [--ms 1,8]
        [--configs 1x2,1x4,1x8,2x4,2x8,1x16] [--variants plain,plain_d2,pdl_notrig,o1pdl,o1pdl_d2] [--json FILE]

FP8 weights (``mma_gemv`` serves fp8_gemm at M <= 8). Per (N, K, M): the byte floor, the shipped
dispatch (``fp8_gemm``: picked config, short-launch rule) and every config x variant timed with
``lowbit.bench.gemm.stack_us`` (8 distinct weights back to back in one CUDA graph after an L2
flush, µs per call). Variants force ``triton_mma``'s switches: ``plain`` (no PDL, Triton's -O3),
``pdl`` (programmatic dependent launch + early trigger), ``pdl_notrig`` (PDL, trigger at exit),
``o1`` (ptxas -O1), ``o1pdl`` (both); ``_d2``: two K blocks in flight ahead (``triton_mma.DEPTH``). Prints the best per shape and its ratio to the floor.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

VARIANTS = {
    "plain": {"PDL": False, "PTXAS_OPTIONS": "", "DEPTH": 1},
    "plain_d2": {"PDL": False, "PTXAS_OPTIONS": "", "DEPTH": 2},
    "pdl": {"PDL": True, "TRIGGER": True, "PTXAS_OPTIONS": "", "DEPTH": 1},
    "pdl_notrig": {"PDL": True, "TRIGGER": False, "PTXAS_OPTIONS": "", "DEPTH": 1},
    "o1": {"PDL": False, "PTXAS_OPTIONS": "-O1", "DEPTH": 1},
    "o1pdl": {"PDL": True, "TRIGGER": True, "PTXAS_OPTIONS": "-O1", "DEPTH": 1},
    "o1pdl_d2": {"PDL": True, "TRIGGER": True, "PTXAS_OPTIONS": "-O1", "DEPTH": 2},
}
DEFAULT_VARIANTS = "plain,plain_d2,pdl_notrig,o1pdl,o1pdl_d2"


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
    rows = [{"copy_gbps": round(bw, 1), "layers": args.layers}]
    print(json.dumps(rows[0]), flush=True)
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
            rows.append(rec)
            print(json.dumps(rec), flush=True)
            del layers
            torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
