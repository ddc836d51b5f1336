"""Summarize a ``bench_coarse_wgmma.py`` log: per (shape, bits, M), each path against one of them.

    python3 scripts/compare_head_paths.py LOG [LOG ...] [--base default]

Reads the bench's JSON lines (its stdout log) and prints, per (shape, bits, M), the base path's
fast argmax (us, x its byte floor, x cuBLAS) and coarse pass, then every other path's difference
in argmax and coarse pass (us) and its argmax agreement; error records are printed as they are.
The device scripts call it after each bench run instead of carrying their own summary.
"""
from __future__ import annotations

import argparse
import json


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("logs", nargs="+")
    ap.add_argument("--base", default="default", help="the path the others are compared with")
    args = ap.parse_args()
    for path in args.logs:
        try:
            lines = open(path).read().splitlines()
        except OSError as e:  # a bench cut by its timeout may leave nothing
            print(path, "missing:", e)
            continue
        tab: dict = {}
        for line in lines:
            if not line.startswith("{"):
                continue
            r = json.loads(line)
            if "bits" in r and "argmax_us" in r:
                tab.setdefault((r["shape"], r["bits"], r["M"]), {})[r["impl"]] = r
            elif "error" in r:
                print("ERR", r)
        for key, paths in tab.items():
            base = paths.get(args.base)
            if base is None:
                print(key, f"no {args.base!r} path:", sorted(paths))
                continue
            print(key, f"{args.base} {base['argmax_us']} x{base['argmax_x_floor']} cuBLAS x{base['argmax_vs_cublas']} "
                       f"coarse {base['coarse_us']}",
                  " | ".join(f"{name}: {r['argmax_us'] - base['argmax_us']:+.1f} (coarse "
                             f"{r['coarse_us'] - base['coarse_us']:+.1f}) agree {r['agree_exact']}"
                             for name, r in paths.items() if name != args.base))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
