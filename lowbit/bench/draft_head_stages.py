"""Benchmark probe: certified ``topk(16)`` of the draft head split into its stages.

Head: the 124160 x 5120 benchmark head of :mod:`lowbit.bench.draft_head` (random N(0, 0.02)
bf16, INT8 g64 coarse copy); M in {1, 16, 64}. Rows, each by CUDA-graph replay (the head and
its coarse copy, 1.27 GB and 0.64 GB, are far over L2, so every replay reads them cold):

* ``certified top16`` -- ``DraftHead.topk(x, 16)`` as dispatched (the per-k sizes: 8
  candidates a block, a cap of 256);
* ``coarse pass kcand C`` -- the certified INT8 coarse pass alone, C = 4 (the configured
  default) and 8 (the per-k size at k = 16): where candidates a block cost in the pass;
* ``tail kcand C cap R`` -- the sync-free certified tail alone
  (:func:`~lowbit.ops.coarse_head.certified_tail.certified_select_rerank`) over the outputs of
  one coarse pass with C candidates a block, at (8, 256), at (4, 128) (the sizes before they
  grew with k) and at (8, 1024): a cap over this head's top-16 sets, so no row is wide and each
  row's own programs rescore its members. ``extra``: the rates of the tail's verdicts over its
  replays (``wide_rate``: sets over the cap; ``fallback_rate``: rows scored in full;
  ``rescan_rate``).

On this head every row of top-16 is wide (sets of 500-700 tokens): the rows split the time of
such calls between the pass and the tail's handling of wide rows.
"""
from __future__ import annotations

from lowbit.bench.registry import BenchContext, Result, register

SHAPE = (124160, 5120)
MS = (1, 16, 64)
TOPK = 16
#: (candidates a block, cap) of the tail rows: the per-k sizes at k = 16, the configured ones, and
#: a cap above the sets (compiles for sm_90 without spills: 252 registers, ptxas offline)
TAIL_SIZES = ((8, 256), (4, 128), (8, 1024))


@register("draft_head_stages", description="certified DraftHead top-16 split into the coarse pass (4 / 8 "
                                           "candidates a block) and the certified tail, 124160 x 5120")
def run(ctx: BenchContext) -> list[Result]:
    import torch

    from lowbit.bench import timing
    from lowbit.nn.draft_head import DraftHead
    from lowbit.ops.coarse_head import BOUNDS
    from lowbit.ops.coarse_head.certified_tail import certified_select_rerank
    from lowbit.ops.coarse_head.coarse import coarse_head_scaled
    from lowbit.ops.coarse_head.pipeline import CERTIFIED_STATS

    n, k = SHAPE
    dev = ctx.device
    torch.manual_seed(0)
    w = (torch.randn(n, k, device=dev) * 0.02).to(torch.bfloat16)
    head = DraftHead(w, bits=8, mode="certified")
    results: list[Result] = []
    for m in MS:
        case = f"{n}x{k} M{m}"
        x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        head.topk(x, TOPK)  # pack and compile outside any capture
        packing = head.packing

        def coarse(kcand: int, x=x, packing=packing):
            return coarse_head_scaled(x, packing, block=head.block, kcand=kcand, bound=BOUNDS[head.bound],
                                      sigma=head.sigma)

        rows = [("certified top16", timing.time_us(lambda x=x: head.topk(x, TOPK), graph=True), {})]
        for kcand in sorted({c for c, _ in TAIL_SIZES}):
            coarse(kcand)
            rows.append((f"coarse pass kcand {kcand}", timing.time_us(lambda kcand=kcand: coarse(kcand), graph=True),
                         {}))
        for kcand, cap in TAIL_SIZES:
            out = coarse(kcand)
            stats = torch.zeros(len(CERTIFIED_STATS), dtype=torch.int64, device=dev)

            def tail(out=out, cap=cap, stats=stats, x=x):
                return certified_select_rerank(out.cand_key, out.cand_lb, out.cand_idx, out.block_lb, out.block_rest,
                                               x, w, TOPK, cap, head.block, stats)

            tail()  # compile outside any capture
            us = timing.time_us(tail, graph=True)
            st = dict(zip(CERTIFIED_STATS, stats.tolist()))
            rows_seen = max(st["rows"], 1)
            rates = {name: round(st[key] / rows_seen, 4) for name, key in
                     (("wide_rate", "wide"), ("fallback_rate", "fallbacks"), ("rescan_rate", "rescans"))}
            rows.append((f"tail kcand {kcand} cap {cap}", us, rates))
        results += [Result("draft_head_stages", case, impl, us, extra=extra) for impl, us, extra in rows]
        del x
    del head, w
    torch.cuda.empty_cache()
    return results
