"""The draft head's pipelines: coarse pass -> select or certify -> exact rescoring -> fallback.

One function per (mode, answer): :func:`fast_topk`, :func:`certified_topk` (argmax is k = 1),
:func:`fast_logits`, :func:`certified_logits`. Each takes a :class:`HeadState` (the weight, its
coarse packing, the configuration and the statistics) and the rows ``x2 [M, K]``, asks
:mod:`.dispatch` which tail runs, and returns the exact answer; :class:`lowbit.nn.DraftHead`
validates, keeps the state and calls one of them once.

Ties: equal exact values are ordered by the lower token index first. Exact values are fp32 dot
products of the stored x and weight rows (fp32 accumulation).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch

from lowbit._backend import use_triton
from lowbit.ops.coarse_head import dispatch
from lowbit.ops.coarse_head.coarse import coarse_head_scaled, unscale_tensor
from lowbit.ops.coarse_head.packing import CoarsePacking, exact_logits
from lowbit.ops.coarse_head.reference import BOUND_DET, BOUND_NONE, BOUND_STAT
from lowbit.ops.coarse_head.selection import (argmax_lowest, certify, rescan_indices, row_norms, select_fast,
                                              topk_lowest)
from lowbit.ops.gathered import gathered_dot

#: bound names of :class:`HeadConfig` -> the coarse pass's bound
BOUNDS = {"det": BOUND_DET, "stat": BOUND_STAT}
#: the sync-free certified tails' int64 statistics buffer, by position
CERTIFIED_STATS = ("rows", "fallbacks", "wide", "set_sum", "set_max", "calls", "rescans")


@dataclass(frozen=True)
class HeadConfig:
    """A draft head's settings (validated by :class:`lowbit.nn.DraftHead`)."""

    mode: str  # "fast" | "certified"
    kcand: int
    rerank: int
    bound: str  # "det" | "stat"
    sigma: float
    block: int
    kcand_per_k: bool = False  # certified top-k: kcand / rerank were left at their defaults,
    rerank_per_k: bool = False  # which grow with k (certified_sizes)


@dataclass
class HeadStats:
    """Calls, rows, fallbacks (rows scored in full because more blocks may hide members than are
    rescanned), wide (rows whose certified set exceeded the cap: all their candidates are
    rescored where no block hides a member -- the sync-free tail from ``FULL_DOT_MIN_M`` rows
    scores them in full, in its tensor-core batches -- the whole row otherwise),
    rescans (rows certified with up to ``MAX_RESCAN_BLOCKS`` blocks rescored whole) and the
    certified-set sizes. The sync-free tails count on the device (``device``: int64
    ``CERTIFIED_STATS``), so replays of a captured graph count too; :meth:`snapshot` reads it back
    (a host synchronization)."""

    calls: int = 0
    rows: int = 0
    fallbacks: int = 0
    wide: int = 0
    set_rows: int = 0
    set_sum: int = 0
    set_max: int = 0
    rescans: int = 0
    device: torch.Tensor | None = None

    def device_buffer(self, device: torch.device) -> torch.Tensor:
        """The device counters on ``device`` (made zero on first use; moved: the old counts are
        folded into the host counters first)."""
        if self.device is None or self.device.device != device:
            if torch.compiler.is_compiling():
                raise ValueError("DraftHead: call warmup() (or the head once) before torch.compile")
            self._fold()
            self.device = torch.zeros(len(CERTIFIED_STATS), dtype=torch.int64, device=device)
        return self.device

    def _totals(self) -> "HeadStats":
        """The host counts plus the device counters' (read back: a host synchronization)."""
        if self.device is None:
            return dataclasses.replace(self)
        d = dict(zip(CERTIFIED_STATS, self.device.tolist()))
        return HeadStats(self.calls + d["calls"], self.rows + d["rows"], self.fallbacks + d["fallbacks"],
                         self.wide + d["wide"], self.set_rows + d["rows"], self.set_sum + d["set_sum"],
                         max(self.set_max, d["set_max"]), self.rescans + d["rescans"])

    def _fold(self) -> None:
        t = self._totals()
        self.calls, self.rows, self.fallbacks, self.wide = t.calls, t.rows, t.fallbacks, t.wide
        self.set_rows, self.set_sum, self.set_max, self.device = t.set_rows, t.set_sum, t.set_max, None
        self.rescans = t.rescans

    def reset(self) -> None:
        self.calls = self.rows = self.fallbacks = self.wide = self.set_rows = self.set_sum = self.set_max = 0
        self.rescans = 0
        if self.device is not None:
            self.device.zero_()

    def snapshot(self) -> dict:
        """The counts as a dict (reads the device counters back)."""
        t = self._totals()
        return {"calls": t.calls, "rows": t.rows, "fallbacks": t.fallbacks, "wide": t.wide, "rescans": t.rescans,
                "fallback_rate": t.fallbacks / t.rows if t.rows else 0.0,
                "mean_set_size": t.set_sum / t.set_rows if t.set_rows else float("nan"),
                "max_set_size": t.set_max}


@dataclass
class HeadState:
    """What a pipeline reads: the weight (dense ``[N, K]``, FP8 rows or NVFP4; the exact rows),
    its coarse packing, the configuration, the statistics and, for a dense weight on the fused
    certified argmax, its row norms (built on first use)."""

    weight: object
    packing: CoarsePacking
    config: HeadConfig
    stats: HeadStats = field(default_factory=HeadStats)
    norms: torch.Tensor | None = None

    @property
    def n(self) -> int:
        return self.packing.n


def _tail(state: HeadState, x2: torch.Tensor, k: int, argmax: bool) -> str:
    w = state.weight
    compiling = torch.compiler.is_compiling()
    dense = isinstance(w, torch.Tensor)
    triton = x2.is_cuda if compiling else use_triton(x2, *((w,) if dense else ()), *state.packing.tensors)
    fused_ready = state.norms is not None or not compiling
    return dispatch.tail_route(dispatch.TailCall(state.config.mode, k, argmax, x2.shape[0], dense,
                                                 dispatch.same_16bit(x2, w) and fused_ready, triton))


def certified_sizes(config: HeadConfig, k: int) -> tuple[int, int]:
    """(candidates per block, cap on the rescored set) of a certified top-``k`` call: the
    configured ``kcand`` / ``rerank``; those left at their defaults are raised with k to
    ``min(4k, block / 16)`` per block and a cap of ``16k``. The top-k of a real head spreads over
    more blocks than its argmax; a row whose set may hide in one or two blocks rescores those
    blocks whole (rescans) instead of the row. On SmolLM2's head (H100, 1024 real positions,
    block 128, k = 16) 8 a block with rescans certify every row, and ``topk(16)`` takes
    61 / 82 / 119 / 221 µs at M = 1 / 4 / 16 / 64 against 85 / 104 / 159 / 320 with 16 a block
    and 143 / 194 / 273 / 646 with 32 (docs/draft_head.md)."""
    kcand = max(config.kcand, min(4 * k, config.block // 16)) if config.kcand_per_k else config.kcand
    return kcand, max(config.rerank, 16 * k) if config.rerank_per_k else config.rerank


def _coarse(state: HeadState, x2: torch.Tensor, bound: int, write_logits: bool = False, kcand: int | None = None):
    """The coarse pass in the packing's scaled domain (``2^-coarse_exp`` times the weight's units,
    see :class:`CoarsePacking`): selection and certification only compare its values among
    themselves; the logits pipelines scale ``out.logits`` back. ``kcand``: candidates per block
    (default: the configured)."""
    c = state.config
    return coarse_head_scaled(x2, state.packing, block=c.block, kcand=kcand or c.kcand, bound=bound, sigma=c.sigma,
                              write_logits=write_logits)


def _rescore(state: HeadState, x2: torch.Tensor, idx: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    exact = gathered_dot(x2, state.weight, idx)
    return torch.where(valid, exact, torch.full_like(exact, float("-inf")))


def _count(stats: HeadStats, rows: int) -> None:
    stats.calls += 1
    stats.rows += rows


def fast_topk(state: HeadState, x2: torch.Tensor, k: int, argmax: bool = False
              ) -> tuple[torch.Tensor | None, torch.Tensor]:
    """Fast mode: the exact top-``k`` among the ``max(rerank, k)`` best coarse candidates (values
    fp32 [M, k], indices int64 [M, k]; ``argmax``: k = 1 and only the indices are asked for, the
    values may be None)."""
    c = state.config
    r = max(c.rerank, k)
    if _tail(state, x2, k, argmax) == "fast_select":
        out = _coarse(state, x2, BOUND_NONE)
        if torch.compiler.is_compiling():
            v, i = torch.ops.lowbit.draft_fast_select(out.cand_key, out.cand_idx, x2, state.weight, r, k, c.kcand)
        else:
            from lowbit.ops.coarse_head.fast_select import fast_select_rerank

            v, i = fast_select_rerank(out.cand_key, out.cand_idx, x2, state.weight, r, k, c.kcand)
        _count(state.stats, x2.shape[0])
        return v, i
    _, idx, vals = _fast_candidates(state, x2, r)
    if argmax:
        return None, argmax_lowest(vals, idx)[:, None]
    return topk_lowest(vals, idx, k)


def _fast_candidates(state: HeadState, x2: torch.Tensor, r: int, write_logits: bool = False):
    out = _coarse(state, x2, BOUND_NONE, write_logits)
    idx, valid = select_fast(out, r)
    vals = _rescore(state, x2, idx, valid)
    _count(state.stats, x2.shape[0])
    return out, idx, vals


def certified_topk(state: HeadState, x2: torch.Tensor, k: int, argmax: bool = False
                   ) -> tuple[torch.Tensor | None, torch.Tensor]:
    """Certified mode: the exact top-``k`` (values fp32 [M, k], indices int64 [M, k]; ``argmax``:
    k = 1 and only the indices are asked for, the values may be None)."""
    tail = _tail(state, x2, k, argmax)
    c = state.config
    compiling = torch.compiler.is_compiling()
    if tail == "fused_argmax":
        if state.norms is None:
            state.norms = row_norms(state.weight)
        stats = state.stats.device_buffer(x2.device)
        if compiling:
            idx = torch.ops.lowbit.draft_fused_argmax(x2, state.weight, state.norms, c.rerank, stats)
        else:
            from lowbit.ops.coarse_head.fused_argmax import fused_argmax

            idx = fused_argmax(x2, state.weight, state.norms, c.rerank, stats)
        return None, idx[:, None]
    if tail == "certified_tail":
        kcand, cap = certified_sizes(c, k)
        out = _coarse(state, x2, BOUNDS[c.bound], kcand=kcand)
        stats = state.stats.device_buffer(x2.device)
        if compiling:
            op = torch.ops.lowbit.draft_certified_select
        else:
            from lowbit.ops.coarse_head.certified_tail import certified_select_rerank as op
        return op(out.cand_key, out.cand_lb, out.cand_idx, out.block_lb, out.block_rest, x2, state.weight, k,
                  cap, c.block, stats)
    _, idx, vals, patches = _certified_sync(state, x2, k)
    if argmax:
        ans = argmax_lowest(vals, idx)
        for rows, p_idx, p_vals in patches:
            ans[rows] = argmax_lowest(p_vals, p_idx)
        return None, ans[:, None]
    v, i = topk_lowest(*_at_least(vals, idx, k), k)
    for rows, p_idx, p_vals in patches:
        v[rows], i[rows] = topk_lowest(*_at_least(p_vals, p_idx, k), k)
    return v, i


def _at_least(vals: torch.Tensor, idx: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``vals`` / ``idx`` padded with -inf fillers to at least k columns."""
    if vals.shape[1] >= k:
        return vals, idx
    pad = k - vals.shape[1]
    return (torch.nn.functional.pad(vals, (0, pad), value=float("-inf")), torch.nn.functional.pad(idx, (0, pad)))


def _certified_sync(state: HeadState, x2: torch.Tensor, k: int, write_logits: bool = False):
    """Rescored certified candidates, plus the rows answered otherwise (one host sync).

    Returns (coarse out, idx [M, T], exact vals [M, T], patches): a list of (rows int64 [R], idx
    [R, T'], exact vals [R, T'], -inf where no token) replacing those rows' answers: ``rescan``
    rows (their members and their up to ``MAX_RESCAN_BLOCKS`` rescored blocks), ``wide`` rows
    whose blocks hide nothing (every candidate rescored), and the rest of the uncertified rows
    scored in full (:class:`~.selection.Certified`).
    """
    c, st = state.config, state.stats
    kcand, cap = certified_sizes(c, k)
    out = _coarse(state, x2, BOUNDS[c.bound], write_logits, kcand)
    cert = certify(out, k, cap, c.block, state.n)
    vals = _rescore(state, x2, cert.idx, cert.valid)
    no_block = ~cert.over.any(-1)
    all_cands = cert.wide & no_block
    full = cert.hidden | (cert.wide & ~no_block)
    counts = torch.stack([cert.hidden.sum(), cert.wide.sum(), cert.rescan.sum(), cert.size.sum(), cert.size.max(),
                          all_cands.sum(), full.sum()]).tolist()
    n_hidden, n_wide, n_rescan, size_sum, size_max, n_all, n_full = (int(v) for v in counts)
    st.calls += 1
    st.rows += x2.shape[0]
    st.fallbacks += n_hidden
    st.wide += n_wide
    st.rescans += n_rescan
    st.set_rows += x2.shape[0]
    st.set_sum += size_sum
    st.set_max = max(st.set_max, size_max)
    patches = []
    if n_rescan:
        rows = cert.rescan.nonzero().squeeze(-1)
        r_idx, r_valid = rescan_indices(cert, rows, out.cand_idx, cap, c.block, state.n)
        patches.append((rows, r_idx, _rescore(state, x2[rows], r_idx, r_valid)))
    if n_all:
        rows = all_cands.nonzero().squeeze(-1)
        w_idx = out.cand_idx[rows]
        patches.append((rows, w_idx, _rescore(state, x2[rows], w_idx, out.cand_key[rows] > float("-inf"))))
    if n_full:
        rows = full.nonzero().squeeze(-1)
        patches.append((rows, torch.arange(state.n, device=x2.device).expand(rows.shape[0], -1),
                        _exact_full(state, x2[rows])))
    return out, cert.idx, vals, patches


def _exact_full(state: HeadState, xr: torch.Tensor) -> torch.Tensor:
    """Exact fp32 logits [B, N] of whole rows: the same gathered_dot as the rerank on the GPU
    (streams the stored rows, nothing dequantized in full), a chunked fp32 matmul on the CPU."""
    if xr.device.type != "cuda":
        return exact_logits(xr, state.weight, state.n)
    ar = torch.arange(state.n, device=xr.device)
    return torch.cat([gathered_dot(xr[i:i + 8], state.weight, ar.expand(min(8, xr.shape[0] - i), -1))
                      for i in range(0, xr.shape[0], 8)])


def _scatter_exact(base: torch.Tensor, idx: torch.Tensor, vals: torch.Tensor) -> torch.Tensor:
    """``base`` with the exact ``vals`` at ``idx``; fillers (-inf: no token) are pointed at a real
    token of the row (every row rescores at least one)."""
    filler = vals == float("-inf")
    real = (~filler).to(torch.int8).argmax(-1, keepdim=True)  # a column holding a real token
    idx = torch.where(filler, idx.gather(1, real), idx)
    vals = torch.where(filler, vals.gather(1, real), vals)
    return base.scatter(1, idx, vals)


def fast_logits(state: HeadState, x2: torch.Tensor, topk_only: bool) -> torch.Tensor:
    """Fast mode's fp32 [M, N]: coarse logits everywhere (or -inf with ``topk_only``), exact on the
    ``rerank`` best candidates. Coarse logits are in the weight's units (scaled back by
    ``2^coarse_exp`` from a prescaled coarse copy, exactly)."""
    out, idx, vals = _fast_candidates(state, x2, state.config.rerank, write_logits=not topk_only)
    base = (torch.full((x2.shape[0], state.n), float("-inf"), device=x2.device) if topk_only
            else unscale_tensor(out.logits, state.packing))
    return _scatter_exact(base, idx, vals)


def certified_logits(state: HeadState, x2: torch.Tensor, topk_only: bool) -> torch.Tensor:
    """Certified mode's fp32 [M, N]: coarse logits everywhere (or -inf with ``topk_only``), exact on
    the certified argmax set, or on the whole row where it fell back (one host sync). Coarse logits
    are in the weight's units (scaled back by ``2^coarse_exp`` from a prescaled coarse copy, exactly)."""
    out, idx, vals, patches = _certified_sync(state, x2, 1, write_logits=not topk_only)
    base = (torch.full((x2.shape[0], state.n), float("-inf"), device=x2.device) if topk_only
            else unscale_tensor(out.logits, state.packing))
    base = _scatter_exact(base, idx, vals)
    for rows, p_idx, p_vals in patches:
        base[rows] = _scatter_exact(base[rows], p_idx, p_vals)
    return base


#: mode -> (top-k pipeline, logits pipeline)
PIPELINES = {"fast": (fast_topk, fast_logits), "certified": (certified_topk, certified_logits)}

__all__ = ["BOUNDS", "CERTIFIED_STATS", "PIPELINES", "HeadConfig", "HeadState", "HeadStats", "certified_logits",
           "certified_sizes", "certified_topk", "fast_logits", "fast_topk"]
