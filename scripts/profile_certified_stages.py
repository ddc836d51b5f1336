"""Where a certified draft-head call spends its GPU time (H200): each stage captured alone in a
CUDA graph and replayed over real hidden states with L2 flushed (``head_bench.cold_graph_us``).

    python3 scripts/profile_certified_stages.py DATA.pt.xz [--json $OUT/stages.json] [--ms 1,4,16,32,64]
        [--set certified.FULL_DOT=1] [--set triton_mma.FUSED_ALPHA=1] [--set coarse_head.MMA_MAX_M_CERTIFIED=16]

Stages, per M: the certified coarse pass on the tensor cores (``MMA_MAX_M_CERTIFIED`` = 64:
launches of 16 rows) and on the fp32 band kernels; the fast-mode coarse pass (no bound) for the
cost of the bound; the device selection + rescoring + fallback check alone (on the coarse outputs
of the first batch); the whole certified argmax as the head dispatches it; cuBLAS ``F.linear``
alone and with ``argmax``; the head's certified ``topk(16)`` (most rows fall back with the
default kcand = 4: the fallback's cost). ``--set MODULE.NAME=INT`` sets a module switch of
``lowbit.ops.coarse_head`` (``coarse_head``, ``certified``, ``triton_mma``) before anything runs,
for A/B runs of the switched-off forms.
"""
from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
BATCHES = 16


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("data")
    ap.add_argument("--json", default=None)
    ap.add_argument("--ms", default="1,4,16,32,64")
    ap.add_argument("--set", action="append", default=[], metavar="MODULE.NAME=INT")
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F

    import lowbit.ops.coarse_head as ch
    from lowbit.ops.coarse_head import certified
    from lowbit import DraftHead
    from head_bench import RecordLog, cold_graph_us
    from real_head_data import load

    from lowbit.ops.coarse_head import triton_mma

    modules = {"coarse_head": ch, "certified": certified, "triton_mma": triton_mma}
    for item in args.set:
        name, value = item.split("=")
        mod, attr = name.split(".")
        if not hasattr(modules[mod], attr):
            raise SystemExit(f"--set {item}: {mod} has no {attr}")
        cur = getattr(modules[mod], attr)
        setattr(modules[mod], attr, bool(int(value)) if cur is None else type(cur)(int(value)))
    blob = load(args.data)
    w = blob["weight"].cuda()
    hidden = blob["hidden"].cuda()
    log = RecordLog()
    log({"switches": args.set})
    head = DraftHead(w, mode="certified", bits=8, group_size=64)
    head.warmup(max_m=64, ks=(1,))
    packing, block, kcand = head.packing, head.block, head.kcand
    packing.mma_tiled()

    def switched(module, name, value, fn):
        """fn with ``module.name = value`` while it runs (the dispatch reads it at call time)."""
        def run(*a):
            old = getattr(module, name)
            setattr(module, name, value)
            try:
                return fn(*a)
            finally:
                setattr(module, name, old)
        return run

    def coarse(bound, mma_limit):
        return switched(ch, "MMA_MAX_M_CERTIFIED", mma_limit,
                        lambda x: ch.coarse_head(x, packing, block=block, kcand=kcand, bound=bound))

    def tail(fused):
        return switched(certified, "FUSED_TAIL", fused, lambda x: ch.certified_select_rerank(
            out0.cand_key, out0.cand_lb, out0.cand_idx, out0.block_lb, out0.block_rest, x, w, 1, head.rerank, stats))

    for m in [int(v) for v in args.ms.split(",")]:
        starts = torch.linspace(0, hidden.shape[0] - m, BATCHES).long().tolist()
        xs = [hidden[s:s + m].contiguous() for s in starts]
        out0 = ch.coarse_head(xs[0], packing, block=block, kcand=kcand, bound=ch.BOUND_DET)
        stats = ch.new_certified_stats(w.device)
        stages = {
            "coarse certified, tensor cores": coarse(ch.BOUND_DET, 64),
            "coarse certified, fp32 band kernels": coarse(ch.BOUND_DET, 0),
            "coarse fast (no bound)": coarse(ch.BOUND_NONE, 0),
            "select + rescore + fallback check, one launch": tail(True),
            "select + rescore + fallback check, two launches": tail(False),
            "certified argmax (head)": head.argmax,
            "certified topk16 (head)": lambda x: head.topk(x, 16),
            "cuBLAS F.linear": lambda x: F.linear(x, w),
            "cuBLAS F.linear + argmax": lambda x: F.linear(x, w).argmax(-1),
        }
        for name, fn in stages.items():
            log({"M": m, "stage": name, "graph_us": round(cold_graph_us(fn, xs), 1)})
    log.save(args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
