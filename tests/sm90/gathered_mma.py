"""Compile the NVFP4 gathered tensor-core kernel (``lowbit/ops/gathered/triton_mma.py``) for sm_90
without a GPU and report, per config and kernel variant (``LEAN`` off / on): registers, spills,
the SASS instruction count, the order of its global loads (L) and MMAs (M), and the chunk loop's
length and mix (none when the loop is fully unrolled or peeled). Strides are specialised as the benchmark's launches specialise them
(contiguous rows, 16-divisible row strides), which decides whether the row loads are 16 bytes
wide.

    python -m tests.sm90.gathered_mma [--configs 4096:1x8x1x1,4096:1x8x1x0,...] [--dump DIR] [--pdl] [--ptxas=-O1]

A config is ``K:RTxWxDxSPLIT``.
"""
from __future__ import annotations

import argparse
import collections
import os
import sys

os.environ.pop("TRITON_INTERPRET", None)

from tests.sm90.mma_gemv import kind  # noqa: E402
from tests.sm90.compiler import compile_sm90, cuobjdump, load_mma_order, loop_body, resource_usage, sass_lines  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--configs", default="256:1x1x1x1,1024:1x4x1x1,1024:2x2x1x1,4096:1x8x1x1,4096:1x8x1x0")
    ap.add_argument("--dump", default=None, help="write each SASS listing here")
    ap.add_argument("--pdl", action="store_true", help="the programmatic-dependent-launch variant (wait + trigger)")
    ap.add_argument("--ptxas", default=None, help="extra ptxas options (e.g. -O1: loads stay ahead of the MMAs)")
    args = ap.parse_args()
    from lowbit.ops.gathered import triton_mma as tm

    fn = tm._gathered_mma_kernel
    sig = {n: "i32" for n in fn.arg_names}
    sig.update({"p_x": "*i32", "p_w": "*i32", "p_s": "*i16", "p_gs": "*fp32", "p_idx": "*i64", "p_val": "*fp32",
                "p_out": "*fp32", "alpha": "fp32"})
    # pointers and the row strides divisible by 16; unit strides are constants, as at launch
    divisible = tuple(fn.arg_names.index(n) for n in ("p_x", "p_w", "p_s", "p_gs", "p_idx", "p_val", "p_out", "s_xb",
                                                       "s_wn", "s_sn", "s_ib", "s_vb", "s_ob"))
    for spec in args.configs.split(","):
        k, cfg = spec.split(":")
        rt, w, d, split = (int(v) for v in cfg.split("x"))
        for lean in (False, True):
            consts = dict(s_it=1, s_vt=1, s_ot=1, K=int(k), BIAS=True, RT=rt, W=w, D=d, SPLIT=bool(split), LEAN=lean,
                          INTERPRET=False, PDL=args.pdl, TRIGGER=args.pdl)
            s = dict(sig, **{c: "constexpr" for c in consts})
            kern = compile_sm90(fn, s, consts, divisible=divisible, num_warps=w, num_stages=1,
                                **({"ptx_options": args.ptxas} if args.ptxas else {}))
            sass = cuobjdump(kern, "-sass")
            lines = sass_lines(sass)
            body = loop_body(lines)
            per = collections.Counter(kind(o) for _, o, _ in body)
            print(f"K{k} {cfg} LEAN={int(lean)}: {resource_usage(kern)}; {len(lines)} instr; loads / MMAs in order "
                  f"{load_mma_order(lines)};"
                  f" chunk loop {len(body)}"
                  + (": " + ", ".join(f"{n} {c}" for n, c in sorted(per.items())) if body else " (unrolled)"))
            if args.dump:
                os.makedirs(args.dump, exist_ok=True)
                with open(os.path.join(args.dump, f"gathered_k{k}_{cfg}_lean{int(lean)}.sass"), "w") as f:
                    f.write(sass)
    return 0


if __name__ == "__main__":
    sys.exit(main())
