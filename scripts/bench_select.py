"""Time the draft head's fast-mode selection forms alone on the H200 (CUDA-graph replay).

    python3 scripts/bench_select.py [--json $OUT/select.json]

Candidates as the 124160 x 5120 head emits them at block 128, kcand 8 (C = 7760 keys per row,
each block's best first), R = 32 (the fast mode's rerank), M in {1, 4, 16, 64}. Prints µs per
form and checks that every form selects the same tokens in the same order.
"""
from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from scripts.bench_rows import save_rows  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    import torch

    from lowbit.bench.timing import time_us
    from lowbit.ops.coarse_head import select as sel_mod

    n, block, kcand, r, kdim = 124160, 128, 8, 32, 5120
    nb = -(-n // block)
    c = nb * kcand
    dev = "cuda"
    rows = []
    for m in (1, 4, 16, 64):
        key = torch.randn(m, nb, kcand, device=dev).sort(dim=-1, descending=True).values.reshape(m, c)
        idx = torch.arange(c, device=dev).repeat(m, 1)
        x = torch.randn(m, kdim, device=dev)
        w = torch.randn(c, kdim, device=dev, dtype=torch.bfloat16)
        picks = {}
        for form in ("bitonic", "two_stage", "flat"):
            sel_mod.SELECT = form
            kc = 0 if form == "flat" else kcand
            picks[form] = sel_mod.fast_select_rerank(key, idx, x, w, r, 1, kc)
            us = time_us(lambda: sel_mod.fast_select_rerank(key, idx, x, w, r, 1, kc), graph=True)
            rows.append(dict(m=m, form=form, us=us))
            print(f"M {m:3d} {form:10s} select + rerank {us:7.2f} us", flush=True)
        same = all(torch.equal(picks[f][1], picks["bitonic"][1]) for f in picks)
        print(f"M {m:3d} same argmax from every form: {same}", flush=True)
        rows.append(dict(m=m, same=same))
    sel_mod.SELECT = "bitonic"
    save_rows(args.json, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
