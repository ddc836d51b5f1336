"""Same-run A/B of the FP4 decode GEMVs: the Gluon wgmma GEMV (``fp4_wgmma_gemv``, per (STAGES,
SPLIT) config) against the shipped ``mma_gemv`` and row-wise / per-tensor ``torch._scaled_mm``,
on the benchmark's five (N, K), timed as a layer stack (``lowbit.bench.gemm.stack_us``: L
distinct weights back to back in one CUDA graph after an L2 flush) and as single calls.

    python3 scripts/bench_wgmma_gemv.py [--ms 1,16] [--layers 8] [--configs 4x1,4x2,...] [--json F]

Each config's output is checked against ``mma_gemv`` (relative error, printed) before timing.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from scripts.bench_rows import emit_row, save_rows  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--ms", default="1,16")
    ap.add_argument("--configs", default="p1s1w4,p2s2w4,p2s2w4pipe,p2s2w8,p4s4w4",
                    help="pPsSwW[flags]: P stages per CTA (SPLIT = ceil(K/512 / P)), a ring of S, W warps; flags "
                         "(any of, in this order): pipe, spin, at (weight fragments loaded at their block: "
                         "ldsm_ahead=False), xf (activation loads before the weight TMAs), pdl (programmatic "
                         "dependent launch), tr (pdl triggering the next launch at once)")
    ap.add_argument("--shapes", default=None, help="N:K,N:K,... (default: the benchmark's five)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    import torch

    from lowbit.bench.gemm import NK, cold_us, decode_layers, gemm_bytes, stack_us
    from lowbit.bench.timing import copy_bandwidth_gbps
    from lowbit.ops.fp4_gemm import gluon_wgmma_gemv as g
    from lowbit.ops.fp8_gemm.triton_mma import mma_gemv

    bw = copy_bandwidth_gbps()
    rows = [{"copy_gbps": round(bw, 1), "layers": args.layers}]
    print(json.dumps(rows[0]), flush=True)
    shapes = NK if args.shapes is None else [tuple(int(v) for v in nk.split(":")) for nk in args.shapes.split(",")]
    for n, k in shapes:
        for m in [int(v) for v in args.ms.split(",")]:
            layers = decode_layers(m, n, k, True, args.layers)
            auto = g.pick_wgmma_gemv_config(n, k, m)
            cfgs = []
            for spec in args.configs.split(","):
                head = re.match(r"p(\d+)s(\d+)w(\d+)", spec)
                flags = re.findall(r"pipe|spin|at|xf|pdl|tr", spec[head.end():])
                if "".join(flags) != spec[head.end():]:
                    raise SystemExit(f"bad config {spec!r}")
                p_, s_, w_ = (int(v) for v in head.groups())
                cfg = ((s_, -(-(k // 512) // p_), w_), tuple(flags))
                if cfg not in cfgs:
                    cfgs.append(cfg)
            rec = {"M": m, "N": n, "K": k, "floor_us": round(gemm_bytes(m, n, k, True) / (bw * 1e3), 2),
                   "auto": list(auto)}
            fns = {"mma_gemv": [lambda a=a, wq=wq: mma_gemv(a.data, a.scale, wq.packed, wq.scale, fp4=True)
                                for a, wq, _, _ in layers],
                   "rowwise": [r for *_, r in layers], "tensor": [t for _, _, t, _ in layers]}
            a0, wq0 = layers[0][0], layers[0][1]
            ref = mma_gemv(a0.data, a0.scale, wq0.packed, wq0.scale, fp4=True).float()
            for cfg, flags in cfgs:
                name = f"wgmma_s{cfg[0]}_split{cfg[1]}_w{cfg[2]}" + "".join("_" + f for f in flags)
                kw = dict(config=cfg, pipe="pipe" in flags, spin="spin" in flags, ldsm_ahead="at" not in flags,
                          x_first="xf" in flags, pdl="pdl" in flags, trigger="tr" in flags)
                got = g.fp4_wgmma_gemv(a0.data, a0.scale, wq0.packed, wq0.scale, **kw).float()
                rec[name + "_err"] = float(((got - ref).norm() / ref.norm()).item())
                fns[name] = [lambda a=a, wq=wq, kw=kw: g.fp4_wgmma_gemv(a.data, a.scale, wq.packed, wq.scale, **kw)
                             for a, wq, _, _ in layers]
            for name, fl in fns.items():
                rec[name + "_stack_us"] = round(stack_us(fl), 2)
                rec[name + "_single_us"] = round(cold_us(fl[0], graph=True), 2)
            best = min((nm for nm in fns if nm.startswith("wgmma")), key=lambda nm: rec[nm + "_stack_us"])
            rec["best"] = best
            rec["best_vs_rowwise_stack"] = round(rec["rowwise_stack_us"] / rec[best + "_stack_us"], 2)
            rec["mma_vs_rowwise_stack"] = round(rec["rowwise_stack_us"] / rec["mma_gemv_stack_us"], 2)
            emit_row(rows, rec)
            del layers, fns
            torch.cuda.empty_cache()
    save_rows(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
