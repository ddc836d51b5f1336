"""Benchmark probe: certified ``topk(16)`` of the draft head split into its stages.

Heads: the 124160 x 5120 benchmark head of :mod:`lowbit.bench.draft_head` (random N(0, 0.02)
bf16, INT8 g64 coarse copy), cases ``"124160x5120 M<m>"``; then, where the data file of
:mod:`lowbit.bench.draft_head_real` is present, SmolLM2-135M's real 49152 x 576 head with ``m``
real hidden states spread over the file, cases ``"real 49152x576 M<m>"`` (without the file only
the random head is timed). M in {1, 16, 64}. Rows, each by CUDA-graph replay (the random head
and its coarse copy, 1.27 GB and 0.64 GB, are far over L2, so every replay reads them cold):

* ``certified top16`` -- ``DraftHead.topk(x, 16)`` as dispatched (the per-k sizes: 8
  candidates a block, a cap of 256);
* ``coarse pass kcand C`` -- the certified INT8 coarse pass alone, C = 4 (the configured
  default) and 8 (the per-k size at k = 16): where candidates a block cost in the pass;
* ``tail kcand C cap R`` -- the sync-free certified tail alone
  (:func:`~lowbit.ops.coarse_head.certified_tail.certified_select_rerank`) over the outputs of
  one coarse pass with C candidates a block, at (8, 256), at (4, 128) (the sizes before they
  grew with k) and at (8, 1024): a cap over the random head's top-16 sets, so no row is wide and
  each row's own programs rescore its members. ``extra``: the rates of the tail's verdicts over
  its replays (``wide_rate``: sets over the cap; ``fallback_rate``: rows scored in full;
  ``rescan_rate``).

On the random head every row of top-16 is wide (sets of 500-700 tokens): the rows split the time
of such calls between the pass and the tail's handling of wide rows. On the real head the sets
stay under 256, so its cap-1024 row against the cap-256 row is what the larger cap costs a row
that never needed it (the tail's per-row selection spans the cap plus the rescanned blocks,
rounded up to a power of two: 512 lanes at a cap of 256, 2048 at 1024).
"""
from __future__ import annotations

from lowbit.bench.registry import BenchContext, Result, Skip, register

SHAPE = (124160, 5120)
MS = (1, 16, 64)
TOPK = 16
#: (candidates a block, cap) of the tail rows: the per-k sizes at k = 16, the configured ones, and
#: a cap above the random head's sets (compiles for sm_90 without spills: 252 registers, ptxas offline)
TAIL_SIZES = ((8, 256), (4, 128), (8, 1024))


def _stage_rows(head, w, x, case: str) -> list[Result]:
    """The rows of one certified INT8 ``head`` over ``w`` [N, K] and one batch ``x`` [M, K] (see
    the module docstring)."""
    import torch

    from lowbit.bench import timing
    from lowbit.ops.coarse_head import BOUNDS
    from lowbit.ops.coarse_head.certified_tail import certified_select_rerank
    from lowbit.ops.coarse_head.coarse import coarse_head_scaled
    from lowbit.ops.coarse_head.pipeline import CERTIFIED_STATS

    head.topk(x, TOPK)  # pack and compile outside any capture
    packing = head.packing

    def coarse(kcand: int):
        return coarse_head_scaled(x, packing, block=head.block, kcand=kcand, bound=BOUNDS[head.bound], sigma=head.sigma)

    rows = [("certified top16", timing.time_us(lambda: head.topk(x, TOPK), graph=True), {})]
    for kcand in sorted({c for c, _ in TAIL_SIZES}):
        coarse(kcand)
        rows.append((f"coarse pass kcand {kcand}", timing.time_us(lambda kcand=kcand: coarse(kcand), graph=True), {}))
    for kcand, cap in TAIL_SIZES:
        out = coarse(kcand)
        stats = torch.zeros(len(CERTIFIED_STATS), dtype=torch.int64, device=x.device)

        def tail(out=out, cap=cap, stats=stats):
            return certified_select_rerank(out.cand_key, out.cand_lb, out.cand_idx, out.block_lb, out.block_rest,
                                           x, w, TOPK, cap, head.block, stats)

        tail()  # compile outside any capture
        us = timing.time_us(tail, graph=True)
        st = dict(zip(CERTIFIED_STATS, stats.tolist()))
        rows_seen = max(st["rows"], 1)
        rates = {name: round(st[key] / rows_seen, 4) for name, key in
                 (("wide_rate", "wide"), ("fallback_rate", "fallbacks"), ("rescan_rate", "rescans"))}
        rows.append((f"tail kcand {kcand} cap {cap}", us, rates))
    return [Result("draft_head_stages", case, impl, us, extra=extra) for impl, us, extra in rows]


@register("draft_head_stages", description="certified DraftHead top-16 split into the coarse pass (4 / 8 "
                                           "candidates a block) and the certified tail, 124160 x 5120 "
                                           "(and SmolLM2's real head where its data file is present)")
def run(ctx: BenchContext) -> list[Result]:
    import torch

    from lowbit.bench import draft_head_real
    from lowbit.nn.draft_head import DraftHead

    n, k = SHAPE
    dev = ctx.device
    torch.manual_seed(0)
    w = (torch.randn(n, k, device=dev) * 0.02).to(torch.bfloat16)
    head = DraftHead(w, bits=8, mode="certified")
    results: list[Result] = []
    for m in MS:
        results += _stage_rows(head, w, torch.randn(m, k, device=dev, dtype=torch.bfloat16), f"{n}x{k} M{m}")
    del head, w
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    try:
        blob = draft_head_real.load_or_skip()
    except Skip:
        return results
    w, hidden = blob["weight"].to(dev), blob["hidden"].to(dev)
    n, k = w.shape
    head = DraftHead(w, bits=8, mode="certified")
    for m in MS:
        spread = torch.linspace(0, hidden.shape[0] - 1, m).long().to(hidden.device)  # m positions across the file
        results += _stage_rows(head, w, hidden[spread], f"real {n}x{k} M{m}")
    return results
