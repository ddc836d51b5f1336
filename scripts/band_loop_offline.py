"""The certified band kernel's main loop for NVFP4 rows on the tensor-core path, compiled for sm_90
without a GPU: registers, spills, loop length and its local loads / stores, at the step size the
library picks (``triton.NVFP4_DOT_BK``) or a forced one -- how the thirty-sixth session chose 32.

    python scripts/band_loop_offline.py [--bk 64] [--ms 16,32,64] [--n 124160 --k 5120]

The launches are the certified head's own (``certified_offline.dispatch_launches`` on CPU stand-ins).
"""
from __future__ import annotations

import argparse
import os
import sys
from collections import Counter

os.environ.pop("TRITON_INTERPRET", None)  # before triton is imported
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import certified_offline as co  # noqa: E402
from sm90_offline import compile_launch, distinct_launches, loop_body, loop_report  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bk", type=int, default=0, help="NVFP4 bytes a step on the dot path (0: the library's)")
    ap.add_argument("--ms", default="16,32,64")
    ap.add_argument("--n", type=int, default=124160)
    ap.add_argument("--k", type=int, default=5120)
    args = ap.parse_args()
    import lowbit.ops.coarse_head.triton as tr

    if args.bk:
        tr.NVFP4_DOT_BK = args.bk
    for m in (int(v) for v in args.ms.split(",")):
        for fn, a, kw in distinct_launches(co.dispatch_launches(args.n, args.k, m)):
            if fn.__name__ != "_coarse_head_kernel" or kw.get("KIND") != tr.KIND_NVFP4 or kw["BM"] == 1:
                continue
            kern = compile_launch(fn, a, kw)
            # the main loop: tl.dot is a wgmma here (A from registers)
            ops = loop_report(kern, f"N{args.n} K{args.k} M={m} BM={kw['BM']} BK={kw['BK']} warps={kw.get('num_warps')}",
                              lambda lines: [o for _, o, _ in loop_body(lines, "HGMMA")])
            count = Counter(o.split(".")[0] for o in ops)
            print(f"    {len(ops) / kw['BK']:.2f} loop instructions a row byte; LDL {count['LDL']}, STL {count['STL']}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
