"""A/B of the draft head's tensor-core coarse pass under its module switches, on the H200.

    python3 scripts/bench_coarse_ab.py --set schedule [--json $OUT/ab.json] [--ms 1,8,16] [--bits 2,4,8]
    python3 scripts/bench_coarse_ab.py --set wide_m --ms 32,64

124160 x 5120 bf16 head (random N(0, 0.02) rows), g64, block 128, fast mode. A variant sets
module switches of ``lowbit/ops/coarse_head``, then restores them:

* ``--set schedule``: ``triton_mma.PREFETCH`` 0 (loads at the top of each K step: the schedule
  before the seventh session), 1 (the next step's loads issued before this step's MMAs, one
  loop-carried buffer) or None (the shipped per-(bits, tiles) table), with the register caps of
  ``_register_cap`` or none. Variants measured once and removed with their switches: the loop
  unrolled by two, masked B-fragment loads, ``.cg`` code loads, the code vectors alone one step
  ahead, and Triton's software pipeliner (``p3`` / ``p4 pipelined``, twelfth session: 3-4x
  slower, docs/measurements/2026-12-02_session12_a_coarse_pipelined.log); see
  ``_PREFETCH_TABLE`` and docs/draft_head.md.
* ``--set wide_m`` (M = 17..64): ``band`` (``MMA_MAX_M`` = 16: rows past 16 on the band kernels),
  ``tc16`` / ``tc32`` (``MMA_MAX_M`` = 64 with ``triton_mma.MAX_M`` = 16 / 32: the tensor-core
  pass in launches of two / four 8-column B tiles).

Per (bits, M, variant): the coarse pass alone and fast ``argmax`` end to end (CUDA-graph replay,
``lowbit.bench.timing.time_us``) against cuBLAS bf16 + argmax in the same run, and whether the
logits are bit-identical to the first tensor-core variant's (the same MMAs in the same order).
(The two sets were run as ``bench_coarse_prefetch.py`` and ``bench_coarse_wide_m.py``.)
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from head_bench import K, RecordLog, random_head  # noqa: E402

# set -> variant -> switches: PREFETCH, CAP ("table" = _register_cap as shipped, "none" = no
# maxnreg, or {(bits, nct): maxnreg}), MMA_MAX_M, MAX_M; unnamed switches keep their defaults
SETS = {
    "schedule": {
        "p0 caps": dict(PREFETCH=0),
        "p1 caps": dict(PREFETCH=1),
        "p1 nocap": dict(PREFETCH=1, CAP="none"),
        "p1 int4cap80": dict(PREFETCH=1, CAP={(4, 1): 80}),
        "table": dict(),
        "table o1": dict(PTXAS="-O1"),
    },
    "wide_m": {
        "band": dict(MMA_MAX_M=16, MAX_M=16),
        "tc16": dict(MMA_MAX_M=64, MAX_M=16),
        "tc32": dict(MMA_MAX_M=64, MAX_M=32),
    },
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--set", choices=tuple(SETS), default="schedule")
    ap.add_argument("--json", default=None)
    ap.add_argument("--ms", default="1,16")
    ap.add_argument("--bits", default="2,4,8")
    ap.add_argument("--variants", default=None, help="comma-separated subset of the set's variants")
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F

    import lowbit.ops.coarse_head as ch
    from lowbit import DraftHead
    from lowbit.bench.timing import copy_bandwidth_gbps, time_us
    from lowbit.ops.coarse_head import BOUND_NONE, coarse_head
    from lowbit.ops.coarse_head import triton_mma as tm

    variants = SETS[args.set]
    names = args.variants.split(",") if args.variants else list(variants)
    shipped = dict(PREFETCH=tm.PREFETCH, CAP=tm._register_cap, MMA_MAX_M=ch.MMA_MAX_M, MAX_M=tm.MAX_M,
                   PTXAS=tm.PTXAS_OPTIONS)

    def use(switches: dict) -> None:
        s = {**shipped, **switches}
        tm.PREFETCH, ch.MMA_MAX_M, tm.MAX_M = s["PREFETCH"], s["MMA_MAX_M"], s["MAX_M"]
        tm.PTXAS_OPTIONS = s["PTXAS"]
        cap = s["CAP"]
        if cap == "none":
            tm._register_cap = lambda bits, nct: {}
        elif isinstance(cap, dict):
            tm._register_cap = lambda bits, nct, c=cap: {"maxnreg": c[(bits, nct)]} if (bits, nct) in c else {}
        else:
            tm._register_cap = cap

    w = random_head()
    bw = copy_bandwidth_gbps()
    log = RecordLog()
    log({"copy_gbps": round(bw, 1)})
    heads = {b: DraftHead(w, bits=b, mode="fast") for b in [int(v) for v in args.bits.split(",")]}
    for m in [int(v) for v in args.ms.split(",")]:
        x = torch.randn(m, K, device="cuda", dtype=torch.bfloat16)
        t_lin = time_us(lambda: F.linear(x, w).argmax(-1), graph=True)
        log({"M": m, "impl": "cuBLAS bf16 + argmax", "us": round(t_lin, 1)})
        for bits, h in heads.items():
            p = h._ensure_packed()
            floor = p.nbytes / (bw * 1e3)
            ref = None
            for name in names:
                use(variants[name])
                try:
                    out = coarse_head(x, p, block=128, kcand=h.kcand, bound=BOUND_NONE, write_logits=True)
                    same = None
                    if name != "band":  # the band kernels sum in another order
                        same = True if ref is None else bool(torch.equal(out.logits, ref))
                        ref = out.logits if ref is None else ref
                    h.argmax(x)  # compiles whatever this M needs outside the graph capture
                    torch.cuda.synchronize()
                    tc = time_us(lambda: coarse_head(x, p, block=128, kcand=h.kcand, bound=BOUND_NONE), graph=True)
                    ta = time_us(lambda: h.argmax(x), graph=True)
                    log({"M": m, "bits": bits, "variant": name, "coarse_us": round(tc, 1), "argmax_us": round(ta, 1),
                         "floor_us": round(floor, 1), "argmax_x_floor": round(ta / floor, 2),
                         "coarse_x_floor": round(tc / floor, 2), "speedup_vs_bf16": round(t_lin / ta, 2),
                         "logits_identical_to_first": same})
                except Exception as e:  # noqa: BLE001 - report and go on
                    log({"M": m, "bits": bits, "variant": name, "error": f"{type(e).__name__}: {str(e)[:300]}"})
    use({})
    log.save(args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
