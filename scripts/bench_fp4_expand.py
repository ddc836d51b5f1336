"""fp4_gemm at prefill sizes: the fused FP4 kernel against the re-encode + FP8 GEMM path
(``lowbit/ops/fp4_gemm/expand.py``, switch ``fp4_gemm.triton.EXPAND_MIN_M``), same run, with
``torch._scaled_mm`` FP8 row-wise on the same shape and ``fp8_gemm`` on FP8 weights of the shape.
Cold-L2 timer (``lowbit.bench.gemm.cold_us``: one call, its host launch time included where it
outlasts the flush before it); ``--stack L``: also both paths as a layer stack of L weights in one
CUDA graph (``stack_us``: GPU time, the host out of the picture; the path needs no host read since
the twenty-fourth session, so it captures), ``fused_stack_us`` / ``expand_stack_us``.

    python3 scripts/bench_fp4_expand.py [--ms 64,128,256,512,1024,4096] [--swar on|off] [--stack 4] [--json F]

Per (M, N, K): µs of fused / expand path / the re-encoding alone (``reencode_us``; and with the
word-parallel path off, ``reencode_percode_us``: ``expand.SWAR``) / fp8_gemm / row-wise _scaled_mm,
and the relative difference between the two paths' outputs (both are exact up to fp32 order).
"""
from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from scripts.bench_rows import emit_row, save_rows  # noqa: E402

#: ``fp4_gemm.triton`` switches that send every call down the re-encode path, and none of them
PATH_ON = {"EXPAND_MIN_M": 1, "EXPAND_MIN_MNK": 0, "EXPAND_MIN_MNK_GRAPH": 0}
PATH_OFF = {"EXPAND_MIN_M": None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ms", default="64,128,256,512,1024,4096")
    ap.add_argument("--json", default=None)
    ap.add_argument("--swar", choices=("on", "off", "default"), default="default",
                    help="the re-encoding's word-parallel path (expand.SWAR) for the whole run")
    ap.add_argument("--stack", type=int, default=0, help="also time both paths as a stack of this many layers")
    args = ap.parse_args()
    import torch

    from lowbit.bench.flags import module_flags
    from lowbit.bench.gemm import NK, _gemm_operands, cold_us, scaled_mm_calls, stack_us
    from lowbit.formats import FP8
    from lowbit.ops.fp4_gemm import fp4_gemm
    from lowbit.ops.fp4_gemm import expand
    from lowbit.ops.fp4_gemm import triton as fp4_tr
    from lowbit.ops.fp4_gemm.expand import fp4_weight_to_fp8
    from lowbit.ops.fp8_gemm import fp8_gemm

    if args.swar != "default":
        expand.SWAR = args.swar == "on"
    rows = []
    for n, k in NK:
        for m in [int(v) for v in args.ms.split(",")]:
            a, w, wq = _gemm_operands(m, n, k, fp4=True)
            w8 = FP8.quantize(w, "block", 128)
            call = lambda: fp4_gemm(a.data, a.scale, wq.packed, wq.scale)  # noqa: E731
            with module_flags(fp4_tr, PATH_OFF):
                fused_out = call()
                fused = cold_us(call)
            with module_flags(fp4_tr, PATH_ON):
                exp_out = call()
                expand_us = cold_us(call)
            _, rowwise = scaled_mm_calls(a.data, w8.data)
            diff = ((exp_out.float() - fused_out.float()).norm() / fused_out.float().norm()).item()
            rec = {"M": m, "N": n, "K": k, "fused_us": round(fused, 2), "expand_us": round(expand_us, 2),
                   "reencode_us": round(cold_us(lambda: fp4_weight_to_fp8(wq.packed, wq.scale)), 2),
                   "fp8_gemm_us": round(cold_us(lambda: fp8_gemm(a.data, a.scale, w8.data, w8.scale)), 2),
                   "rowwise_us": round(cold_us(rowwise), 2), "rel_diff": float(f"{diff:.2e}"),
                   "flag": int(fp4_weight_to_fp8(wq.packed, wq.scale)[2].item())}
            with module_flags(expand, {"SWAR": False}):
                rec["reencode_percode_us"] = round(cold_us(lambda: fp4_weight_to_fp8(wq.packed, wq.scale)), 2)
            rec["speedup"] = round(fused / expand_us, 2)
            rec["expand_vs_rowwise"] = round(rec["rowwise_us"] / expand_us, 2)
            if args.stack:  # L distinct weights (the first is wq), one graph
                ws = [wq] + [_gemm_operands(1, n, k, fp4=True)[2] for _ in range(args.stack - 1)]
                fns = [lambda q=q: fp4_gemm(a.data, a.scale, q.packed, q.scale) for q in ws]
                with module_flags(fp4_tr, PATH_OFF):
                    rec["fused_stack_us"] = round(stack_us(fns), 2)
                with module_flags(fp4_tr, PATH_ON):
                    rec["expand_stack_us"] = round(stack_us(fns), 2)
                rec["stack_speedup"] = round(rec["fused_stack_us"] / rec["expand_stack_us"], 2)
                del ws, fns
            emit_row(rows, rec)
            del a, w, wq, w8
            torch.cuda.empty_cache()
    save_rows(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
