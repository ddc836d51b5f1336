"""Time the draft head on the real model's hidden states (H200): certified and fast argmax against
cuBLAS bf16 ``F.linear`` + ``argmax``, same run, same rows.

    python3 scripts/bench_certified_real.py DATA.pt.xz [--json $OUT/real.json] [--ms 1,4,16,32,64]

``DATA``: written by ``scripts/real_head_data.py`` (SmolLM2-135M-Instruct: hidden states bf16
[P, 576] of real text and the model's own continuations, LM-head weight bf16 [49152, 576]).
Per M, 32 batches of M consecutive positions; every implementation answers every batch, timed
two ways: eager (one call between two synchronizations: host launch cost included) and by
CUDA-graph replay (one graph per implementation captured on a static input; per batch the
batch is copied in and L2 flushed outside the timed region, then one replay is timed by CUDA
events: GPU time, cold L2, set sizes and fallbacks as the real data make them). The certified
dense-weight path is sync-free, so its graph holds the whole call. Reported: the median µs per
call, the agreement with the exact argmax of fp32 logits, and the certified sets (mean / max
size, fallback rows). From ``FUSED_ARGMAX_MIN_M`` rows on the certified head's argmax is the
fused one-launch pass over the bf16 rows (``lowbit/ops/coarse_head/fused_argmax.py``); two more
configurations time the same head with it off and at every M.
"""
from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

CONFIGS = {  # name -> DraftHead kwargs (+ "fused_min_m": coarse_head.FUSED_ARGMAX_MIN_M while it runs)
    "certified int8 g64 (default)": dict(mode="certified", bits=8, group_size=64),
    # the same head with the fused certified argmax over the bf16 rows off / at every M
    "certified int8 g64, fused argmax off": dict(mode="certified", bits=8, group_size=64, fused_min_m=2**31),
    "certified fused over the bf16 rows at every M": dict(mode="certified", bits=8, group_size=64, fused_min_m=0),
    # (certified int4 g64 was measured in the eighth session: its bound reaches every candidate of
    # this head, every row falls back; docs/measurements/2026-12-01_session8_a_real_head.json)
    "fast int4 g64 (default)": dict(mode="fast", bits=4, group_size=64),
    "fast int2 g64 k8 r64": dict(mode="fast", bits=2, group_size=64, kcand=8, rerank=64),
}
BATCHES = 32


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("data")
    ap.add_argument("--json", default=None)
    ap.add_argument("--ms", default="1,4,16,32,64")
    ap.add_argument("--fused-configs", default=None, help="JSON from scripts/probe_wide_m.py --pick: the fused "
                    "argmax's launch configuration per M band, instead of the library's")
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F

    from lowbit import DraftHead
    from head_bench import RecordLog, cold_graph_us
    from real_head_data import load

    blob = load(args.data)
    w = blob["weight"].cuda()
    hidden = blob["hidden"].cuda()
    log = RecordLog()

    log({"model": blob.get("model"), "weight": list(w.shape), "positions": hidden.shape[0]})
    if args.fused_configs:
        import json

        from lowbit.ops.coarse_head import fused_argmax as fa

        with open(args.fused_configs) as f:
            for band, rec in json.load(f).items():
                fa._CONFIGS[int(band)] = tuple(rec["config"])
        log({"fused argmax configs": {b: list(c) for b, c in fa._CONFIGS.items()}})
    import contextlib

    import lowbit.ops.coarse_head as ch

    @contextlib.contextmanager
    def switch(name):
        """FUSED_ARGMAX_MIN_M as the configuration asks while its head runs (captures included)."""
        old = ch.FUSED_ARGMAX_MIN_M
        ch.FUSED_ARGMAX_MIN_M = CONFIGS[name].get("fused_min_m", old)
        try:
            yield
        finally:
            ch.FUSED_ARGMAX_MIN_M = old

    heads = {name: DraftHead(w, **{k: v for k, v in kw.items() if k != "fused_min_m"}) for name, kw in CONFIGS.items()}
    for name, h in heads.items():
        with switch(name):
            h.warmup(max_m=max(int(v) for v in args.ms.split(",")), ks=(1,))
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]

    graph_us = cold_graph_us

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
        t_lin_graph = graph_us(lin, xs)
        agree_lin = sum(int((lin(x) == e).sum()) for x, e in zip(xs, exact)) / (m * BATCHES)
        log({"M": m, "impl": "cuBLAS bf16 + argmax", "eager_us": round(t_lin, 1), "graph_us": round(t_lin_graph, 1),
             "agreement_vs_fp32": agree_lin})
        for name, h in heads.items():
            with switch(name):
                h.reset_stats()
                agree = sum(int((h.argmax(x) == e).sum()) for x, e in zip(xs, exact)) / (m * BATCHES)
                st = h.stats
                t = eager_us(h.argmax, xs)
                tg = graph_us(h.argmax, xs)
                extra = {}
                if name == "certified int8 g64 (default)":  # recall@16 of the exact top-16 (fp32 logits), and its time
                    hits = 0
                    for x in xs:
                        ref16 = (x.float() @ w.float().t()).topk(16, dim=-1).indices
                        got16 = h.topk(x, 16)[1]
                        hits += int((got16[:, :, None] == ref16[:, None, :]).any(-1).sum())
                    extra = {"recall16": hits / (16 * m * BATCHES),
                             "topk16_graph_us": round(graph_us(lambda x: h.topk(x, 16), xs), 1)}
                log({"M": m, "impl": name, "eager_us": round(t, 1), "graph_us": round(tg, 1), **extra,
                     "speedup_vs_cublas_eager": round(t_lin / t, 2), "speedup_vs_cublas_graph": round(t_lin_graph / tg, 2),
                     "agreement_vs_fp32": agree, "mean_set": st["mean_set_size"], "max_set": st["max_set_size"],
                     "fallback_rows": st["fallbacks"], "wide_rows": st["wide"]})
    # exactness over every position (the target: >= 8192), against the fp64 argmax (ties to the
    # lower index), in batches of 4 (the INT8 pass) and 64 (the fused pass)
    w64 = w.double()
    for name in ("certified int8 g64 (default)", "certified fused over the bf16 rows at every M"):
        h = heads[name]
        with switch(name):
            for m in (4, 64):
                h.reset_stats()
                agree = total = 0
                for s0 in range(0, hidden.shape[0] - m + 1, m):
                    x = hidden[s0:s0 + m]
                    ref = (x.double() @ w64.t()).argmax(-1)
                    agree += int((h.argmax(x) == ref).sum())
                    total += m
                st = h.stats
                log({"exactness": name, "M": m, "positions": total, "agreement_vs_fp64": agree / total,
                     "mean_set": st["mean_set_size"], "max_set": st["max_set_size"], "fallback_rows": st["fallbacks"]})
    log.save(args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
