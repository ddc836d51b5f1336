"""Time the decode-size tensor-core GEMV (``lowbit/ops/fp8_gemm/triton_mma.py``) against the wgmma
kernels it replaces at M <= 16 and against ``torch._scaled_mm`` (FP8 per-tensor and row-wise),
all in one run on the H200, cold L2, CUDA-graph replays (``lowbit.bench.gemm.cold_us``).

    python3 scripts/bench_mma_gemv.py [--json $OUT/mma_gemv.json] [--ms 1,16] [--configs 1x2,1x4,1x8,1x16,2x4,2x8]
                                      [--ops fp4,fp8] [--decodes f16,e4m3]

Per (N, K) of the issue's five shapes and M: the wgmma kernel (the previous default), mma_gemv at
its picked config and at each ``--configs`` (RT x W), the baselines, the byte floor (bytes /
measured copy bandwidth), and the largest relative difference of mma_gemv to the wgmma kernel.
"""
from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from scripts.bench_rows import emit_row, save_rows  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", default=None)
    ap.add_argument("--ms", default="1,16")
    ap.add_argument("--configs", default="1x2,1x4,1x8,1x16,2x4,2x8", help="RTxW configs, comma-separated")
    ap.add_argument("--ops", default="fp4,fp8")
    ap.add_argument("--decodes", default="f16,e4m3", help="FP4 decodes to time (triton_mma.FP4_RESULT_SCALE keys)")
    args = ap.parse_args()
    import torch

    from lowbit.bench.gemm import NK, _baselines, _gemm_operands, cold_us, gemm_bytes
    from lowbit.bench.timing import copy_bandwidth_gbps
    from lowbit.ops.fp4_gemm import triton as fp4_tr
    from lowbit.ops.fp8_gemm import triton as fp8_tr
    from lowbit.ops.fp8_gemm import triton_mma
    from lowbit.ops.fp8_gemm.triton_mma import mma_gemv, pick_mma_config

    bw = copy_bandwidth_gbps()
    rows = []

    def log(rec):
        emit_row(rows, rec)

    log({"copy_gbps": round(bw, 1)})
    configs = [tuple(int(v) for v in c.split("x")) for c in args.configs.split(",") if c]
    for op in args.ops.split(","):
        fp4 = op == "fp4"
        for n, k in NK:
            for m in [int(v) for v in args.ms.split(",")]:
                a, w, wq = _gemm_operands(m, n, k, fp4=fp4)
                bd, bs = (wq.packed, wq.scale) if fp4 else (wq.data, wq.scale)
                nbytes = gemm_bytes(m, n, k, fp4)
                rec = {"op": op, "M": m, "N": n, "K": k, "floor_us": round(nbytes / (bw * 1e3), 2)}
                # the previous default: the wgmma kernels (forced by passing their band config)
                if fp4:
                    cfg, aligned = fp4_tr.pick_fp4_config(m)
                    old = lambda: fp4_tr.fp4_gemm(a.data, a.scale, bd, bs, config=cfg, aligned=aligned)  # noqa: E731
                else:
                    cfg = fp8_tr.pick_config(m)
                    old = lambda: fp8_tr.fp8_gemm(a.data, a.scale, bd, bs, config=cfg)  # noqa: E731
                c_old = old()
                rec["wgmma_us"] = round(cold_us(old, graph=True), 2)
                picked = pick_mma_config(n, k, m, fp4)
                rec["picked"] = list(picked)
                best = None
                shipped = triton_mma.FP4_DECODE or ("f16" if m > 8 else "e4m3")
                decodes = args.decodes.split(",") if fp4 else [shipped]
                first = {}
                picks = [tuple(picked)]
                for cf in picks + [c for c in configs if c not in picks and c[1] <= k // 128]:
                    for dec in decodes:
                        fn = lambda cf=cf, dec=dec: mma_gemv(a.data, a.scale, bd, bs, fp4=fp4, config=cf, decode=dec)  # noqa: E731
                        c_new = fn()
                        diff = ((c_new.float() - c_old.float()).norm() / c_old.float().norm()).item()
                        us = cold_us(fn, graph=True)
                        key = "mma_" + "x".join(map(str, cf)) + (f"_{dec}" if fp4 else "")
                        rec[key + "_us"] = round(us, 2)
                        rec[key + "_reldiff"] = float(f"{diff:.2e}")
                        if cf in first:  # the decodes must agree bit for bit
                            rec[key + "_same_bits"] = bool(torch.equal(first[cf], c_new))
                        else:
                            first[cf] = c_new
                        if best is None or us < best[1]:
                            best = (cf + ((dec,) if fp4 else ()), us)
                for r in _baselines(op, "", m, n, k, w, a.dequantize(w.dtype), True):
                    rec[r.impl.replace(" ", "_") + "_us"] = round(r.us, 2)
                rec["best"] = [list(best[0]), round(best[1], 2)]
                dk = shipped if shipped in decodes else decodes[0]
                pkey = f"mma_{picked[0]}x{picked[1]}" + (f"_{dk}" if fp4 else "") + "_us"
                rec["picked_vs_rowwise"] = round(rec.get("scaled_mm_fp8_rowwise_us", float("nan")) / rec[pkey], 2)
                rec["picked_x_floor"] = round(rec[pkey] / rec["floor_us"], 2)
                rec["best_vs_rowwise"] = round(rec.get("scaled_mm_fp8_rowwise_us", float("nan")) / best[1], 2)
                log(rec)
    save_rows(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
