"""The selection steps of the draft head in plain torch ops (no host synchronization): the exact
top-k among rescored candidates with the draft head's tie rule (the lower index first among equal
values), fast mode's candidate pick, certified mode's candidate set, and the row norms the fused
certified argmax bounds its error with. They serve the reference backend, FP8 / NVFP4 heads and
the synchronizing certified path; the Triton tails fuse the same steps."""
from __future__ import annotations

import torch

from lowbit.ops.coarse_head.reference import CoarseOut

_INT64_MAX = 2**63 - 1


def argmax_lowest(vals: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """Index of the largest value per row, the lowest index among equals. vals fp32, idx int64 [M, T]."""
    best = vals.amax(-1, keepdim=True)
    return torch.where(vals == best, idx, torch.full_like(idx, _INT64_MAX)).amin(-1)


def topk_lowest(vals: torch.Tensor, idx: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k per row sorted by value descending, the lower index first among equal values."""
    by_idx = idx.argsort(dim=-1, stable=True)
    v, i = vals.gather(-1, by_idx), idx.gather(-1, by_idx)
    by_val = v.argsort(dim=-1, descending=True, stable=True)[:, :k]
    return v.gather(-1, by_val), i.gather(-1, by_val)


def select_fast(out: CoarseOut, r: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``r`` best candidates by coarse logit: (index int64 [M, r'], valid bool [M, r']), r' = min(r, C)."""
    r = min(r, out.cand_key.shape[1])
    key, pos = out.cand_key.topk(r, dim=-1)
    return out.cand_idx.gather(-1, pos), key > float("-inf")


def certify(out: CoarseOut, k: int, cap: int):
    """Certified candidate set for the exact top-``k`` (k = 1: argmax).

    Threshold ``L``: the best lower bound over all tokens (k = 1, from the per-block maxima). For
    k > 1 any k lower bounds of distinct tokens give a valid threshold (the k-th best exact value
    is at least their minimum): ``L`` is the larger of the k-th best block maximum ``L_b`` and the
    k-th best lower bound among the first ``cap`` candidates (in candidate order) whose lower
    bound reaches ``L_b`` -- the k-th best candidate lower bound whenever at most ``cap`` reach
    it, found without ordering all C candidates (the device tail's rule, kept identical here).
    Every token of the exact top-k has ``ub >= L``. The set is certified when no block holds such a token it did
    not emit (``block_rest < L``) and at most ``cap`` candidates reach ``L``.

    Returns (index int64 [M, T], valid bool [M, T], over_block bool [M], over_cap bool [M], size
    int64 [M]), T = min(cap, C): the T candidates with the largest upper bounds, a superset of the
    certified set on every row where neither flag is set. ``over_cap`` without ``over_block``: the
    set is still among the emitted candidates (rescore them all); ``over_block``: a block may
    hide a member (score the whole row).
    """
    c = out.cand_key.shape[1]
    neg = float("-inf")
    if k == 1:
        thr = out.block_lb.amax(-1)
    else:
        m, nb = out.block_lb.shape
        thr = (out.block_lb.topk(k, dim=-1).values[:, -1] if nb >= k
               else torch.full((m,), neg, device=out.cand_key.device))
        hi = out.cand_lb >= thr.unsqueeze(-1)
        first = hi & (hi.cumsum(-1) <= cap)
        if c >= k:
            sub = torch.where(first, out.cand_lb, torch.full_like(out.cand_lb, neg))
            thr = torch.maximum(thr, sub.topk(k, dim=-1).values[:, -1])
    thr = thr.unsqueeze(-1)
    size = (out.cand_key >= thr).sum(-1)
    over_block = (out.block_rest >= thr).any(-1) | (thr.squeeze(-1) == neg)
    t = min(cap, c)
    key, pos = out.cand_key.topk(t, dim=-1)
    return out.cand_idx.gather(-1, pos), key > neg, over_block, size > cap, size


def row_norms(weight: torch.Tensor) -> torch.Tensor:
    """fp32 [N]: ``||w_n||_2`` of the stored rows, computed in fp64 (4096 rows at a time) and
    rounded up to fp32."""
    out = torch.empty(weight.shape[0], dtype=torch.float32, device=weight.device)
    for r0 in range(0, weight.shape[0], 4096):
        nd = weight[r0:r0 + 4096].double().square().sum(1).sqrt()
        nf = nd.float()
        out[r0:r0 + 4096] = torch.where(nf.double() < nd, torch.nextafter(nf, torch.full_like(nf, float("inf"))), nf)
    return out


__all__ = ["argmax_lowest", "certify", "row_norms", "select_fast", "topk_lowest"]
