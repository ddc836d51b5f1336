"""A/B of the K-loop schedules of the draft head's tensor-core coarse pass on the H200.

    python3 scripts/bench_coarse_prefetch.py [--json $OUT/prefetch.json] [--ms 1,16] [--bits 2,4,8]

124160 x 5120 bf16 head (random N(0, 0.02) rows), g64, block 128, fast mode. Variants (module
switches of ``lowbit/ops/coarse_head/triton_mma.py``): ``PREFETCH`` 0 (loads at the top of each K
step: the schedule measured before), 1 (the next step's loads issued before this step's MMAs,
one loop-carried buffer) or the shipped per-(bits, tiles) table, with the register caps of
``_register_cap`` or none. (Variants measured once and removed with their switches: the loop
unrolled by two, masked B-fragment loads, ``.cg`` code loads, the code vectors alone one step
ahead; see ``_PREFETCH_TABLE`` and docs/draft_head.md.) Per (bits, M, variant): the coarse pass
alone and fast ``argmax`` end to end (CUDA-graph replay, ``lowbit.bench.timing.time_us``), against cuBLAS bf16 + argmax
in the same run, and whether the logits are bit-identical to variant 0's (same MMAs, same order).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

# name -> (PREFETCH, cap): cap "table" = _register_cap as shipped, "none" = no maxnreg,
# or a dict {(bits, nct): maxnreg}; PREFETCH None = the shipped table
VARIANTS = {
    "p0 caps": (0, "table"),  # the schedule before the seventh session
    "p1 caps": (1, "table"),
    "p1 nocap": (1, "none"),
    "p1 int4cap80": (1, {(4, 1): 80}),
    "table": (None, "table"),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", default=None)
    ap.add_argument("--ms", default="1,16")
    ap.add_argument("--bits", default="2,4,8")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F

    from lowbit import DraftHead
    from lowbit.bench.timing import copy_bandwidth_gbps, time_us
    from lowbit.ops.coarse_head import BOUND_NONE, coarse_head
    from lowbit.ops.coarse_head import triton_mma as tm

    table_cap = tm._register_cap
    n, k = 124160, 5120
    torch.manual_seed(0)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
    bw = copy_bandwidth_gbps()
    rows = []

    def log(rec):
        rows.append(rec)
        print(json.dumps(rec), flush=True)

    def use(variant):
        mode, cap = VARIANTS[variant]
        tm.PREFETCH = mode
        if cap == "table":
            tm._register_cap = table_cap
        elif cap == "none":
            tm._register_cap = lambda bits, nct: {}
        else:
            tm._register_cap = lambda bits, nct, c=cap: {"maxnreg": c[(bits, nct)]} if (bits, nct) in c else {}

    log({"copy_gbps": round(bw, 1)})
    heads = {b: DraftHead(w, bits=b, mode="fast") for b in [int(v) for v in args.bits.split(",")]}
    for m in [int(v) for v in args.ms.split(",")]:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        t_lin = time_us(lambda: F.linear(x, w).argmax(-1), graph=True)
        log({"M": m, "impl": "cuBLAS bf16 + argmax", "us": round(t_lin, 1)})
        for bits, h in heads.items():
            p = h._ensure_packed()
            floor = p.nbytes / (bw * 1e3)
            ref = None
            for variant in args.variants.split(","):
                use(variant)
                try:
                    out = coarse_head(x, p, block=128, kcand=h.kcand, bound=BOUND_NONE, write_logits=True)
                    same = True if ref is None else bool(torch.equal(out.logits, ref))
                    ref = out.logits if ref is None else ref
                    tc = time_us(lambda: coarse_head(x, p, block=128, kcand=h.kcand, bound=BOUND_NONE), graph=True)
                    ta = time_us(lambda: h.argmax(x), graph=True)
                    log({"M": m, "bits": bits, "variant": variant, "coarse_us": round(tc, 1), "argmax_us": round(ta, 1),
                         "floor_us": round(floor, 1), "argmax_x_floor": round(ta / floor, 2),
                         "coarse_x_floor": round(tc / floor, 2), "speedup_vs_bf16": round(t_lin / ta, 2),
                         "logits_identical_to_first": same})
                except Exception as e:  # noqa: BLE001 - report and go on
                    log({"M": m, "bits": bits, "variant": variant, "error": f"{type(e).__name__}: {str(e)[:300]}"})
    use("table")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
