"""Time the draft head on the real model's hidden states (H200): certified and fast argmax against
cuBLAS bf16 ``F.linear`` + ``argmax``, same run, same rows.

    python3 scripts/bench_certified_real.py DATA.pt.xz [--json $OUT/real.json] [--ms 1,4,16,32,64]

``DATA``: written by ``scripts/real_head_data.py`` (SmolLM2-135M-Instruct: hidden states bf16
[P, 576] of real text and the model's own continuations, LM-head weight bf16 [49152, 576]).
Per M, 32 batches of M consecutive positions; every implementation answers every batch (eager
calls: the certified path reads its overflow counts on the host, so a CUDA graph cannot hold it;
cuBLAS is timed eagerly too, and also by graph replay); the median µs per call, the agreement
with the exact argmax of fp32 logits, and the certified sets (mean / max size, fallback rows).
"""
from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

CONFIGS = {  # name -> DraftHead kwargs
    "certified int8 g64 (default)": dict(mode="certified", bits=8, group_size=64),
    "certified int4 g64": dict(mode="certified", bits=4, group_size=64),
    "fast int4 g64 (default)": dict(mode="fast", bits=4, group_size=64),
    "fast int2 g64 k8 r64": dict(mode="fast", bits=2, group_size=64, kcand=8, rerank=64),
}
BATCHES = 32


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("data")
    ap.add_argument("--json", default=None)
    ap.add_argument("--ms", default="1,4,16,32,64")
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F

    from lowbit import DraftHead
    from lowbit.bench.timing import time_us
    from head_bench import RecordLog
    from real_head_data import load

    blob = load(args.data)
    w = blob["weight"].cuda()
    hidden = blob["hidden"].cuda()
    log = RecordLog()

    log({"model": blob.get("model"), "weight": list(w.shape), "positions": hidden.shape[0]})
    heads = {name: DraftHead(w, **kw) for name, kw in CONFIGS.items()}
    for h in heads.values():
        h.warmup(max_m=max(int(v) for v in args.ms.split(",")), ks=(1,))
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]

    def eager_us(fn, xs) -> float:
        times = []
        for _ in range(3):
            for x in xs:
                torch.cuda.synchronize()
                ev[0].record()
                fn(x)
                ev[1].record()
                torch.cuda.synchronize()
                times.append(ev[0].elapsed_time(ev[1]) * 1e3)
        return sorted(times)[len(times) // 2]

    for m in [int(v) for v in args.ms.split(",")]:
        starts = torch.linspace(0, hidden.shape[0] - m, BATCHES).long().tolist()
        xs = [hidden[s:s + m] for s in starts]
        exact = [(x.float() @ w.float().t()).argmax(-1) for x in xs]
        lin = lambda x: F.linear(x, w).argmax(-1)  # noqa: E731
        t_lin = eager_us(lin, xs)
        t_lin_graph = time_us(lambda: lin(xs[0]), graph=True)
        agree_lin = sum(int((lin(x) == e).sum()) for x, e in zip(xs, exact)) / (m * BATCHES)
        log({"M": m, "impl": "cuBLAS bf16 + argmax", "eager_us": round(t_lin, 1), "graph_us": round(t_lin_graph, 1),
             "agreement_vs_fp32": agree_lin})
        for name, h in heads.items():
            h.reset_stats()
            agree = sum(int((h.argmax(x) == e).sum()) for x, e in zip(xs, exact)) / (m * BATCHES)
            st = h.stats
            t = eager_us(h.argmax, xs)
            rec = {"M": m, "impl": name, "eager_us": round(t, 1), "speedup_vs_cublas_eager": round(t_lin / t, 2),
                   "agreement_vs_fp32": agree, "mean_set": st["mean_set_size"], "max_set": st["max_set_size"],
                   "fallback_rows": st["fallbacks"], "wide_rows": st["wide"]}
            if h.mode == "fast":
                rec["graph_us"] = round(time_us(lambda: h.argmax(xs[0]), graph=True), 1)
            log(rec)
    log.save(args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
