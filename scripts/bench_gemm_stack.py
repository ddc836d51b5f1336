"""Decode GEMMs timed as a layer stack (``lowbit.bench.gemm.stack_us``): L distinct weights of one
(N, K) run back to back in one CUDA graph after an L2 flush, per-call time = total / L, against
``torch._scaled_mm`` FP8 (row-wise and per-tensor) timed the same way on their own L weights, and
next to the single-call ``cold_us`` numbers of the same run. It separates each kernel's own time
from the fixed cost of one timed graph replay (~4.6 µs), which the single-call numbers include.

    python3 scripts/bench_gemm_stack.py [--layers 8] [--ms 1,16] [--ops fp4,fp8] [--json $OUT/gemm_stack.json]
                                        [--variants default,o1]

Per (op, N, K, M): µs per call for lowbit and the baselines in both timers, the byte floor (bytes
/ measured copy bandwidth) and lowbit's speedup over row-wise ``_scaled_mm``. ``--variants``: lowbit
timed once per variant in the same run (``default``: the shipped short-launch rule of
``triton_mma.SHORT_LAUNCH_BYTES``; the others force it everywhere: ``plain``: neither; ``o1``:
``mma_gemv`` compiled with ptxas -O1, ``triton_mma.PTXAS_OPTIONS``; ``pdl``: ``mma_gemv`` as a
programmatic dependent launch with the early trigger, ``triton_mma.PDL``; ``o1pdl``: both), as
``lowbit_<variant>_stack_us`` next to the default's ``lowbit_stack_us``. The variants touch
``mma_gemv`` only (fp8_gemm at M <= 8, fp4_gemm at M <= 16). ``mma64`` (fp8 only) sends fp8_gemm's
M = 9..64 to ``mma_gemv`` too (``fp8_gemm.triton``'s ``WGMMA_GEMV_M`` / ``MMA_GEMV_MAX_M_FP8`` /
``DECODE_GLUON_M``); ``dg17`` sends M = 17..64 to the Gluon decode kernel (``DECODE_GLUON_M``) where its
64-row tile count qualifies; ``fp4mma64`` (fp4 only) sends fp4_gemm's M = 17..64 to ``mma_gemv``
(``MMA_GEMV_MAX_M_FP4``); ``chunk64`` / ``wide64`` (fp4 only) send M = 17..64 to the wgmma GEMV over
16-row chunks / 32-row chunks with the wgmma's N = 32 (``fp4_gemm.triton.WGMMA_GEMV_CHUNK_MAX_M``,
``WGMMA_GEMV_WIDE``; wide64 is the default since the twenty-third session), ``tri64`` to the Triton
aligned-step kernel (the default before); ``wgpdl`` (fp8 only) launches fp8_gemm's wgmma GEMV (M = 9..16) as a
programmatic dependent launch (``fp8_gemm.gluon_wgmma_gemv.PDL``); ``wg64pdl`` also sends M = 17..64
to it (``WGMMA_GEMV_M``); ``aqpdl`` / ``aqoff`` launch act_quant as a PDL launch everywhere / nowhere
(``act_quant.triton.PDL``; the default is its rule, PDL up to ``PDL_MAX_ROWS`` = 8 rows), which matters with ``--chain``: each lowbit layer then quantizes its bf16 activations first
(act_quant -> GEMM, what a decode ``Linear`` runs; the ``_scaled_mm`` baselines stay without).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from scripts.bench_rows import emit_row, save_rows  # noqa: E402

#: launch variants of ``mma_gemv`` (switches of ``lowbit.ops.fp8_gemm.triton_mma``, forced
#: everywhere instead of the short-launch rule); ``scripts/sweep_mma_gemv_stack.py`` uses them too
MMA_GEMV_LAUNCH = {"plain": {"PTXAS_OPTIONS": "", "PDL": False}, "o1": {"PTXAS_OPTIONS": "-O1", "PDL": False},
                   "pdl": {"PTXAS_OPTIONS": "", "PDL": True}, "o1pdl": {"PTXAS_OPTIONS": "-O1", "PDL": True}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--ms", default="1,16")
    ap.add_argument("--ops", default="fp4,fp8")
    ap.add_argument("--json", default=None)
    ap.add_argument("--variants", default="default", help="default and the names of the variant table below")
    ap.add_argument("--chain", action="store_true",
                    help="time act_quant of the bf16 activations followed by the GEMM (a decode Linear's chain)")
    args = ap.parse_args()
    import torch

    from lowbit.bench.flags import module_flags
    from lowbit.bench.gemm import NK, cold_us, decode_layers, gemm_bytes, stack_us
    from lowbit.bench.timing import copy_bandwidth_gbps
    from lowbit.ops.fp4_gemm import fp4_gemm
    from lowbit.ops.fp8_gemm import fp8_gemm
    from lowbit.ops.fp8_gemm import triton_mma
    from lowbit.ops.fp8_gemm import triton as fp8_tr
    from lowbit.ops.fp4_gemm import triton as fp4_tr
    from lowbit.ops.fp8_gemm import gluon_wgmma_gemv as fp8_wg
    from lowbit.ops.act_quant import act_quant
    from lowbit.ops.act_quant import triton as aq_tr

    # decode dispatch variants: fp8_gemm's M = 9..64 on mma_gemv (its short-launch rule included) instead of the wgmma GEMV (M 9..16) and the Gluon decode kernel
    # (M 33..64) (mma64); fp8_gemm's M = 17..64 on the Gluon decode kernel wherever its tile count
    # qualifies (dg17); fp4_gemm's M = 17..64 on mma_gemv (fp4mma64) or on the wgmma GEMV over
    # 16-row chunks (chunk64) / 32-row chunks with the wgmma's N = 32 (wide64, the default) or on the
    # Triton aligned-step kernel (tri64); fp8_gemm's wgmma GEMV
    # (M = 9..16) as a programmatic dependent launch (wgpdl), and serving M = 9..64 that way (wg64pdl);
    # act_quant as a PDL launch everywhere (aqpdl) or nowhere (aqoff; both ops, meant for --chain);
    # and MMA_GEMV_LAUNCH's (both ops).
    # name -> (op or None, [(module, switches), ...])
    variant_flags = {
        **{name: (None, [(triton_mma, switches)]) for name, switches in MMA_GEMV_LAUNCH.items()},
        "mma64": ("fp8", [(fp8_tr, {"WGMMA_GEMV_M": (1, 0), "MMA_GEMV_MAX_M_FP8": 64, "DECODE_GLUON_M": (1, 0)})]),
        "dg17": ("fp8", [(fp8_tr, {"DECODE_GLUON_M": (17, 64)})]),
        "fp4mma64": ("fp4", [(fp8_tr, {"MMA_GEMV_MAX_M_FP4": 64})]),
        "chunk64": ("fp4", [(fp4_tr, {"WGMMA_GEMV_CHUNK_MAX_M": 64, "WGMMA_GEMV_WIDE": False})]),
        "wide64": ("fp4", [(fp4_tr, {"WGMMA_GEMV_CHUNK_MAX_M": 64, "WGMMA_GEMV_WIDE": True})]),
        "tri64": ("fp4", [(fp4_tr, {"WGMMA_GEMV_CHUNK_MAX_M": 16})]),
        "wgpdl": ("fp8", [(fp8_wg, {"PDL": True})]),
        "wg64pdl": ("fp8", [(fp8_tr, {"WGMMA_GEMV_M": (9, 64), "DECODE_GLUON_M": (1, 0), "DECODE_GLUON_SHORT_M": (1, 0)}),
                            (fp8_wg, {"PDL": True})]),
        "aqpdl": (None, [(aq_tr, {"PDL": True})]),
        "aqoff": (None, [(aq_tr, {"PDL": False})]),
    }
    variants = [v for v in args.variants.split(",") if v]
    unknown = [v for v in variants if v != "default" and v not in variant_flags]
    if unknown:
        ap.error(f"unknown variants {unknown} (known: default, {', '.join(variant_flags)})")

    bw = copy_bandwidth_gbps()
    rows = [{"copy_gbps": round(bw, 1), "layers": args.layers}]
    print(json.dumps(rows[0]), flush=True)
    for op in args.ops.split(","):
        fp4 = op == "fp4"
        for n, k in NK:
            for m in [int(v) for v in args.ms.split(",")]:
                layers = decode_layers(m, n, k, fp4, args.layers)
                gemm = fp4_gemm if fp4 else fp8_gemm
                if args.chain:  # act_quant of the layer's bf16 activations, then the GEMM
                    ours = [lambda x=a.dequantize(torch.bfloat16), w=wq.packed if fp4 else wq.data, s=wq.scale, g=gemm:
                            g(*act_quant(x), w, s) for a, wq, _, _ in layers]
                else:
                    ours = [lambda a=a, w=wq.packed if fp4 else wq.data, s=wq.scale, g=gemm: g(a.data, a.scale, w, s)
                            for a, wq, _, _ in layers]
                tensor = [t for _, _, t, _ in layers]
                rowwise = [r for *_, r in layers]
                nbytes = gemm_bytes(m, n, k, fp4)
                rec = {"op": op, "M": m, "N": n, "K": k, "floor_us": round(nbytes / (bw * 1e3), 2)}
                for name, fns in (("lowbit", ours), ("rowwise", rowwise), ("tensor", tensor)):
                    rec[name + "_stack_us"] = round(stack_us(fns), 2)
                    rec[name + "_single_us"] = round(cold_us(fns[0], graph=True), 2)
                for v in variants:
                    if v == "default" or variant_flags[v][0] not in (None, op):  # another op's dispatch
                        continue
                    with contextlib.ExitStack() as stack:
                        for module, switches in variant_flags[v][1]:
                            stack.enter_context(module_flags(module, switches))
                        rec[f"lowbit_{v}_stack_us"] = round(stack_us(ours), 2)
                for t in ("stack", "single"):
                    rec[f"vs_rowwise_{t}"] = round(rec[f"rowwise_{t}_us"] / rec[f"lowbit_{t}_us"], 2)
                    rec[f"x_floor_{t}"] = round(rec[f"lowbit_{t}_us"] / rec["floor_us"], 2)
                emit_row(rows, rec)
                del layers, ours, rowwise, tensor
                torch.cuda.empty_cache()
    save_rows(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
