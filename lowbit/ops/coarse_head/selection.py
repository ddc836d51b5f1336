"""The selection steps of the draft head in plain torch ops (no host synchronization): the exact
top-k among rescored candidates with the draft head's tie rule (the lower index first among equal
values), fast mode's candidate pick, certified mode's candidate set, and the row norms the fused
certified argmax bounds its error with. They serve the reference backend, FP8 / NVFP4 heads and
the synchronizing certified path; the Triton tails fuse the same steps."""
from __future__ import annotations

from typing import NamedTuple

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


#: blocks of a row that may hide members (an unemitted upper bound reaches the threshold) and are
#: rescored whole instead of the row: SmolLM2's real head at k = 16 with 8 candidates a block has
#: at most 2 such blocks on every one of 1024 positions (ROADMAP.md §1)
MAX_RESCAN_BLOCKS = 2


class Certified(NamedTuple):
    """What :func:`certify` decides per row (M rows, C candidates, NB blocks, T = min(cap, C)).

    idx int64 [M, T], valid bool [M, T]: the T candidates with the largest upper bounds (a
    superset of the certified set on rows that are neither ``hidden``, ``wide`` nor ``rescan``);
    member bool [M, C]: candidates with ``ub >= L`` outside the rescored blocks; over bool [M, NB]:
    the blocks that may hide members; hidden bool [M]: more than ``MAX_RESCAN_BLOCKS`` such blocks
    (or no threshold): the row is scored in full; wide bool [M]: not hidden, but more than ``cap``
    members (or fewer than k tokens in all); rescan bool [M]: certified with 1..MAX_RESCAN_BLOCKS
    blocks rescored whole besides the members; size int64 [M]: candidates with ``ub >= L``.
    """

    idx: torch.Tensor
    valid: torch.Tensor
    member: torch.Tensor
    over: torch.Tensor
    hidden: torch.Tensor
    wide: torch.Tensor
    rescan: torch.Tensor
    size: torch.Tensor


def certify(out: CoarseOut, k: int, cap: int, block: int, n: int) -> Certified:
    """Certified candidate set for the exact top-``k`` (k = 1: argmax) of N = ``n`` tokens in
    blocks of ``block``.

    Threshold ``L``: the best lower bound over all tokens (k = 1, from the per-block maxima). For
    k > 1 any k lower bounds of distinct tokens give a valid threshold (the k-th best exact value
    is at least their minimum): ``L`` is the larger of the k-th best block maximum ``L_b`` and the
    k-th best lower bound among the first ``cap`` candidates (in candidate order) whose lower
    bound reaches ``L_b`` -- the k-th best candidate lower bound whenever at most ``cap`` reach
    it, found without ordering all C candidates (the device tail's rule, kept identical here).

    Every token of the exact top-k has ``ub >= L``: it is an emitted candidate with ``ub >= L``,
    or an unemitted token of a block whose best unemitted ``ub`` (``block_rest``) reaches ``L``.
    Up to ``MAX_RESCAN_BLOCKS`` such blocks are rescored whole, with the candidates outside them;
    more, and the whole row is scored.
    """
    m, c = out.cand_key.shape
    nb = out.block_lb.shape[1]
    neg = float("-inf")
    if k == 1:
        thr = out.block_lb.amax(-1)
    else:
        thr = (out.block_lb.topk(k, dim=-1).values[:, -1] if nb >= k
               else torch.full((m,), neg, device=out.cand_key.device))
        hi = out.cand_lb >= thr.unsqueeze(-1)
        first = hi & (hi.cumsum(-1) <= cap)
        if c >= k:
            sub = torch.where(first, out.cand_lb, torch.full_like(out.cand_lb, neg))
            thr = torch.maximum(thr, sub.topk(k, dim=-1).values[:, -1])
    over = out.block_rest >= thr.unsqueeze(-1)
    nob = over.sum(-1)
    hidden = (nob > MAX_RESCAN_BLOCKS) | (thr == neg)
    ranked = out.cand_key >= thr.unsqueeze(-1)
    size = ranked.sum(-1)
    member = ranked & ~over.gather(-1, (out.cand_idx // block).clamp(max=nb - 1))
    n_c = member.sum(-1)
    tokens = (torch.arange(nb, device=over.device) * block).clamp(max=n)
    per_block = torch.minimum(torch.full_like(tokens, block), n - tokens)
    n_blk = (over * per_block).sum(-1)
    wide = ~hidden & ((n_c > cap) | (n_c + n_blk < k))
    rescan = ~hidden & ~wide & (nob > 0)
    t = min(cap, c)
    key, pos = out.cand_key.topk(t, dim=-1)
    return Certified(out.cand_idx.gather(-1, pos), key > neg, member, over, hidden, wide, rescan, size)


def rescan_indices(cert: Certified, rows: torch.Tensor, cand_idx: torch.Tensor, cap: int, block: int, n: int
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens to rescore on the ``rescan`` rows ``rows`` (int64 [R]): their members (at most
    ``cap``), then every token of their rescored blocks. (index int64 [R, T'], valid bool [R, T'])."""
    member = cert.member[rows]
    t = min(cap, member.shape[1])
    pos = member.to(torch.int8).topk(t, dim=-1).indices  # the members first (any order)
    idx_c, ok_c = cand_idx[rows].gather(-1, pos), member.gather(-1, pos)
    over = cert.over[rows]
    nbk = min(MAX_RESCAN_BLOCKS, over.shape[1])
    bpos = over.to(torch.int8).topk(nbk, dim=-1).indices
    tok = (bpos * block).unsqueeze(-1) + torch.arange(block, device=rows.device)
    ok_b = over.gather(-1, bpos).unsqueeze(-1) & (tok < n)
    idx = torch.cat([idx_c, tok.flatten(1).clamp(max=n - 1)], dim=1)
    return idx, torch.cat([ok_c, ok_b.flatten(1)], dim=1)


def row_norms(weight: torch.Tensor) -> torch.Tensor:
    """fp32 [N]: ``||w_n||_2`` of the stored rows, computed in fp64 (4096 rows at a time) and
    rounded up to fp32."""
    out = torch.empty(weight.shape[0], dtype=torch.float32, device=weight.device)
    for r0 in range(0, weight.shape[0], 4096):
        nd = weight[r0:r0 + 4096].double().square().sum(1).sqrt()
        nf = nd.float()
        out[r0:r0 + 4096] = torch.where(nf.double() < nd, torch.nextafter(nf, torch.full_like(nf, float("inf"))), nf)
    return out


__all__ = ["MAX_RESCAN_BLOCKS", "Certified", "argmax_lowest", "certify", "rescan_indices", "row_norms", "select_fast",
           "topk_lowest"]
