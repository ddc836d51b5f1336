"""Compile the decode GEMV (``lowbit/ops/fp8_gemm/triton_mma.py``) for sm_90 without a GPU and
count its SASS: registers, spills, and per K-loop iteration the instructions by kind (the
conversions ``F2FP``, the integer ALU ops, the MMAs), the numbers that decide an issue- or
pipe-bound GEMV.

    python -m tests.sm90.mma_gemv [--k 16384] [--configs fp4:2x8x1,fp4:1x4x2,...] [--ptxas=-O1] [--pdl]

A config is ``op:RTxWxNCT[:decode]`` (row tiles per program, warps, 8-column tiles, the FP4
decode: ``f16`` or ``e4m3``). Also printed: the order of the global loads (L) and MMAs (M) in the
loop (or, unrolled, the whole kernel): ptxas at -O3 sinks loads between MMAs.
"""
from __future__ import annotations

import argparse
import collections
import os
import sys

os.environ.pop("TRITON_INTERPRET", None)

from tests.sm90.compiler import compile_sm90, cuobjdump, load_mma_order, loop_body, resource_usage, sass_lines  # noqa: E402

#: opcode prefixes grouped by the SM sub-partition pipe they occupy (sm_90)
KINDS = {
    "conv": ("F2FP", "F2F", "I2F", "F2I"),
    "alu": ("LOP3", "SHF", "PRMT", "IADD3", "ISETP", "SEL", "IMNMX", "VIMNMX", "LEA", "MOV", "SGXT", "BMSK", "FSEL",
            "FSETP", "PLOP3"),
    "fma": ("FFMA", "FMUL", "FADD", "IMAD", "HFMA2", "HADD2", "HMUL2"),
    "mma": ("HMMA",),
    "mem": ("LDG", "STG", "LDS", "STS", "LDL", "STL", "RED", "ATOM"),
}


def kind(op: str) -> str:
    for k, prefixes in KINDS.items():
        if op.split(".")[0] in prefixes:
            return k
    return "other"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--k", type=int, default=16384)
    ap.add_argument("--configs", default="fp4:2x8x1:e4m3,fp4:2x8x1:f16,fp4:1x4x1:e4m3,fp4:1x4x1:f16,fp4:2x4x2:e4m3,fp4:2x4x2:f16,fp4:1x2x2:e4m3,fp4:1x2x2:f16,fp8:1x8x1")
    ap.add_argument("--ptxas", default=None, help="extra ptxas options (e.g. -O1)")
    ap.add_argument("--pdl", action="store_true", help="the programmatic-dependent-launch variant (wait + trigger)")
    args = ap.parse_args()
    from lowbit.ops.fp8_gemm import triton_mma as tm

    for spec in args.configs.split(","):
        op, cfg, *rest = spec.split(":")
        rt, w, nct = (int(v) for v in cfg.split("x"))
        dec = rest[0] if rest else (tm.FP4_DECODE or ("f16" if nct > 1 else "e4m3"))
        fp4 = op == "fp4"
        sig = {"a_ptr": "*i32", "as_ptr": "*fp32", "b_ptr": "*i32", "bs_ptr": "*i32" if fp4 else "*fp32",
               "c_ptr": "*bf16", "M": "i32", "N": "i32", "K": "constexpr", "FP4": "constexpr", "SCALE": "constexpr",
               "AS_E8M0": "constexpr", "BS_E8M0": "constexpr", "RT": "constexpr", "NCT": "constexpr",
               "W": "constexpr", "INTERPRET": "constexpr", "F16": "constexpr", "PDL": "constexpr",
               "TRIGGER": "constexpr"}
        consts = {"K": args.k, "FP4": fp4, "SCALE": tm.FP4_RESULT_SCALE[dec] if fp4 else 1.0, "AS_E8M0": False,
                  "BS_E8M0": False, "RT": rt, "NCT": nct, "W": w, "INTERPRET": False, "F16": dec == "f16",
                  "PDL": args.pdl, "TRIGGER": args.pdl}
        kern = compile_sm90(tm._mma_gemv_kernel, sig, consts, divisible=(0, 1, 2, 3, 4), num_warps=w, num_stages=1,
                            **({"ptx_options": args.ptxas} if args.ptxas else {}))
        lines = sass_lines(cuobjdump(kern, "-sass"))
        body = loop_body(lines)
        per = collections.Counter(kind(o) for _, o, _ in body)
        ops = collections.Counter(o.split(".")[0] for _, o, _ in body)
        print(f"{op}{':' + dec if fp4 else ''} RT{rt} W{w} NCT{nct} K{args.k}: {resource_usage(kern)}; loop {len(body)} instr "
              f"({len(body) / rt:.0f} per 16x128 tile): " + ", ".join(f"{k} {v}" for k, v in sorted(per.items())))
        print("   top: " + ", ".join(f"{o} {c}" for o, c in ops.most_common(14)))
        print(f"   loads / MMAs in order{'' if body else ' (unrolled)'}: {load_mma_order(body or lines)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
