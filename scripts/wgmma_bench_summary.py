"""One line per (M, N, K) of a ``bench_wgmma_gemv.py`` JSON: the auto config, row-wise
``_scaled_mm``, every wgmma config's layer-stack µs fastest first, and the largest relative error.

    python3 scripts/wgmma_bench_summary.py RESULTS.json
"""
from __future__ import annotations

import json
import sys


def main(path: str) -> int:
    for r in json.load(open(path)):
        if "M" not in r:
            print(r)
            continue
        ks = sorted((k[:-9] for k in r if k.endswith("_stack_us") and k.startswith("wgmma")),
                    key=lambda k: r[k + "_stack_us"])
        err = max(v for k, v in r.items() if k.endswith("_err"))
        print(r["M"], r["N"], r["K"], "auto", r["auto"], "row", r["rowwise_stack_us"],
              " ".join(f"{k[6:]}={r[k + '_stack_us']}" for k in ks), "best x", r["best_vs_rowwise_stack"], "err", err)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
