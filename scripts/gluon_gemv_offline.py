"""Compile the Gluon FP4 decode GEMV (``lowbit/ops/fp8_gemm/gluon_gemv.py``) for sm_90 without a
GPU and report per config its registers, shared memory and main-loop SASS counts.

    python scripts/gluon_gemv_offline.py [--k 7168] [--n 4096] [--configs 1x2x4:e4m3:1,1x4x4:f16:16,...]

A config is ``RTxWxSTAGES:decode:M``.
"""
from __future__ import annotations

import argparse
import collections
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
os.environ.pop("TRITON_INTERPRET", None)

from scripts.sm90_offline import cuobjdump, loop_body, resource_usage, sass_lines  # noqa: E402


def compile_gemv(n: int, k: int, m: int, rt: int, w: int, stages: int, decode: str, as_e8m0: bool = False):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    from lowbit.ops.fp8_gemm import gluon_gemv as g

    signature = {"a_ptr": "*i32", "as_ptr": "*u8" if as_e8m0 else "*fp32", "b_ptr": "*i32", "bs_ptr": "*i32",
                 "c_ptr": "*bf16", "M": "i32", "N": "i32", "n_it": "i32"}
    constexprs = dict(K=k, SCALE=g.FP4_RESULT_SCALE[decode], AS_E8M0=as_e8m0, RT=rt, NCT=-(-m // 8), W=w,
                      STAGES=stages, F16=decode == "f16")
    for name in constexprs:
        signature[name] = "constexpr"
    attrs = {(i,): [["tt.divisibility", 16]] for i in range(5)}
    if n % 16 == 0:
        attrs[(6,)] = [["tt.divisibility", 16]]
    fn = g._fp4_gemv_kernel
    signature = {p: signature[p] for p in fn.arg_names}
    src = GluonASTSource(fn, signature, constexprs, attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": w})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--k", type=int, default=7168)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--configs", default="1x2x4:e4m3:1,1x4x4:e4m3:1,1x2x4:f16:16,2x4x3:f16:16")
    ap.add_argument("--dump", default=None, help="write each config's SASS to DIR")
    args = ap.parse_args()
    for cfg in args.configs.split(","):
        shape, decode, m = cfg.split(":")
        rt, w, stages = (int(v) for v in shape.split("x"))
        kern = compile_gemv(args.n, args.k, int(m), rt, w, stages, decode)
        sass = cuobjdump(kern, "-sass")
        if args.dump:
            os.makedirs(args.dump, exist_ok=True)
            with open(os.path.join(args.dump, cfg.replace(":", "_") + ".sass"), "w") as f:
                f.write(sass)
        body = loop_body(sass_lines(sass))
        ops = collections.Counter(op.split(".")[0] for _, op, _ in body)
        print(f"{cfg} N{args.n} K{args.k}: {resource_usage(kern)} smem {kern.metadata.shared} B; loop {len(body)} "
              f"instr: " + ", ".join(f"{o} {c}" for o, c in ops.most_common(16)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
