"""Pure-PyTorch definition of the draft head's coarse pass (also its CPU path). No Triton here.

Given activations ``x [M, K]`` and a coarse copy ``W~ [N, K]`` of the head (INTx, or the checkpoint's
own NVFP4 / FP8-per-row rows), the coarse pass computes

* ``c[m, n] = x[m] . W~[n]`` in fp32 (the coarse logits), and, in certified mode,
* a per-token bound ``b[m, n] >= |x[m] . W[n] - c[m, n]|`` (deterministic) or a multiple of its
  standard deviation (statistical), and
* per block of ``block`` consecutive tokens, the top ``kcand`` by key (``c`` in fast mode,
  ``ub = c + b`` in certified mode), ties to the lower token index, plus in certified mode the
  block's best lower bound ``max(c - b)`` and the best key it did *not* emit (``rest``).

Bounds (see docs/draft_head.md for the derivation). For INTx with ``|w - w~| <= s_g/2``::

    det:  b = (1 + eps) * 0.5 * sum_g s_g * ||x_g||_1 + ABS_SLACK
    stat: b = sigma * sqrt(sum_g s_g^2 / 12 * ||x_g||_2^2)          (probabilistic)

For native NVFP4 / FP8 rows the coarse values are the exact weights, so only fp32 rounding is
left: ``b = gamma * (1 + 2 gamma) * sum_k |x_k| |w_k| + ABS_SLACK``.

``eps`` covers fp32 rounding of the coarse dot and of the bound itself (:func:`rounding_eps`).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import torch

BOUND_NONE, BOUND_DET, BOUND_STAT = 0, 1, 2
#: u = 2^-23 is *twice* the fp32 unit roundoff: tensor-core accumulators may truncate instead of
#: rounding to nearest, which at most doubles each addition's error.
UNIT = 2.0**-23
#: An absolute term for underflow: a bf16 lo-part of a split fp32 x may lose up to 2^-134 per
#: element when subnormal; times |w~| <= 255 * 65504 and K <= 2^16 that is < 1e-28.
ABS_SLACK = 1e-28


def gamma(depth: int) -> float:
    """Higham's gamma_n = n u / (1 - n u): relative error bound of an n-deep fp32 sum."""
    nu = depth * UNIT
    return nu / (1.0 - nu)


def rounding_eps(bits: int | None, depth: int, split_x: bool, offset: int = 0) -> float:
    """Relative slack on the deterministic bound so it also covers fp32 rounding.

    INTx (``bits`` set): the coarse value is evaluated as ``sum_g s_g (sum x q - z sum x)``;
    every elementary term is at most ``s_g * qmax * |x_k|`` and there are two per element, so the
    absolute rounding error is <= ``gamma(depth) * 2 qmax * sum_g s_g ||x_g||_1`` = ``4 qmax
    gamma * D`` with ``D = 0.5 sum_g s_g ||x_g||_1``; ``D`` itself is computed with relative error
    <= gamma (+ one multiply), hence ``eps = (4 qmax + 4) gamma``. When an fp32 ``x`` is fed to
    bf16 tensor cores as hi + lo parts, the residual ``|x - hi - lo| <= 2^-16 |x|`` adds
    ``2^-16 * sum |x||w~| <= 2^-15 qmax D``.

    ``offset``: a kernel that multiplies ``q + offset`` (and folds ``offset`` into the zero point)
    has terms up to ``s (qmax + offset) |x_k|``: qmax is replaced by ``qmax + offset``.

    Native rows (``bits`` None): returns the multiplier of ``A = sum |x||w|``:
    ``gamma (1 + 2 gamma)`` (+ ``2^-16`` for the split-x residual).
    """
    g = gamma(depth)
    if bits is None:
        return g * (1.0 + 2.0 * g) + (2.0**-16 if split_x else 0.0)
    qmax = (1 << bits) - 1 + offset
    return (4 * qmax + 4) * g + (2.0**-15 * qmax if split_x else 0.0)


def reference_depth(k: int, ngroups: int) -> int:
    """Worst-case summation depth for a BLAS matmul of unknown order over K, plus group sums."""
    return k + ngroups + 8


class CoarseOut(NamedTuple):
    """Outputs of the coarse pass. C = nblocks * kcand.

    cand_key fp32 [M, C]: coarse logit (fast) or upper bound ``c + b`` (certified), -inf = no token;
    cand_lb fp32 [M, C]: ``c - b`` (certified; else an empty [0, C]);
    cand_idx int64 [M, C]: token index (0 for a -inf filler);
    block_lb fp32 [M, nblocks]: best ``c - b`` of each block (certified; else [0, nblocks]);
    block_rest fp32 [M, nblocks]: best key of each block NOT emitted (certified; else [0, nblocks]);
    logits fp32 [M, N]: the coarse logits ``c`` when requested (else [0, N]).
    """

    cand_key: torch.Tensor
    cand_lb: torch.Tensor
    cand_idx: torch.Tensor
    block_lb: torch.Tensor
    block_rest: torch.Tensor
    logits: torch.Tensor


def _group_norms(xf: torch.Tensor, group_size: int, ngroups: int, p: int) -> torch.Tensor:
    """Per-group ``sum |x|`` (p=1) or ``sum x^2`` (p=2) of fp32 ``x [M, K]``, zero-padded: [M, NG]."""
    m, k = xf.shape
    padded = xf.new_zeros(m, ngroups * group_size)
    padded[:, :k] = xf.abs() if p == 1 else xf * xf
    return padded.view(m, ngroups, group_size).sum(-1)


def coarse_values_reference(
    x: torch.Tensor,
    dense: torch.Tensor,
    coef: torch.Tensor | None,
    *,
    bits: int | None,
    group_size: int,
    bound: int,
    sigma: float,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Coarse logits and the per-token bound.

    x [M, K] float; dense fp32 [N, K]: the dequantized coarse rows (exact in fp32: (q - z) * s
    needs at most 8 + 11 significant bits); coef fp32 [N, NG]: the INTx group scales ``s`` (bits
    set) or None for native rows. Returns (c [M, N] fp32, b [M, N] fp32 or None).
    """
    xf = x.float()
    c = xf @ dense.t()
    if bound == BOUND_NONE:
        return c, None
    k = x.shape[-1]
    if bits is None:  # native rows: only rounding remains
        a = xf.abs() @ dense.abs().t()
        return c, a * rounding_eps(None, reference_depth(k, 1), False) + ABS_SLACK
    ngroups = coef.shape[1]
    if bound == BOUND_DET:
        l1 = _group_norms(xf, group_size, ngroups, 1)
        eps = rounding_eps(bits, reference_depth(k, ngroups), False)
        return c, (l1 @ coef.t()) * (0.5 * (1.0 + eps)) + ABS_SLACK
    l2 = _group_norms(xf, group_size, ngroups, 2)
    var = l2 @ (coef * coef).t() * (1.0 / 12.0)
    return c, sigma * var.sqrt()


def block_candidates_reference(
    c: torch.Tensor, b: torch.Tensor | None, *, block: int, kcand: int, write_logits: bool
) -> CoarseOut:
    """Per-block top-``kcand`` of ``key = c`` (b None) or ``c + b``; ties to the lower index.

    A block whose tokens run out (the last, partial block; kcand > its size) emits -inf with
    index 0. NaN keys are never selected (NaN inputs give unspecified candidates).
    """
    m, n = c.shape
    nb = -(-n // block)
    key = c if b is None else c + b
    pad = nb * block - n
    neg = float("-inf")
    kp = torch.nn.functional.pad(key + 0.0, (0, pad), value=neg).view(m, nb, block)  # + 0.0: -0 -> +0
    # Lexicographic (key desc, index asc) as one int64: an order-preserving int32 image of the
    # fp32 key, shifted left 8 bits, plus (block - 1 - index). One topk then gives the kernel's
    # successive max-and-mask order, ties to the lower index.
    bits32 = kp.view(torch.int32)
    ordered = torch.where(bits32 >= 0, bits32, bits32 ^ 0x7FFFFFFF).to(torch.int64)
    local = torch.arange(block, device=c.device, dtype=torch.int64)
    lex = ordered * 256 + (block - 1 - local)
    top = min(kcand + 1, block)
    _, loc_all = lex.topk(top, dim=-1, sorted=True)
    loc = loc_all[..., :kcand]
    cand_key = kp.gather(-1, loc)
    base = (torch.arange(nb, device=c.device) * block).view(1, nb, 1)
    cand_idx = torch.where(cand_key == neg, torch.zeros_like(loc), loc + base)
    if b is None:
        return CoarseOut(cand_key.reshape(m, -1), c.new_empty(0, nb * kcand), cand_idx.reshape(m, -1),
                         c.new_empty(0, nb), c.new_empty(0, nb), c if write_logits else c.new_empty(0, n))
    lb_all = torch.nn.functional.pad(c - b, (0, pad), value=neg).view(m, nb, block)
    cand_lb = lb_all.gather(-1, loc)
    rest = kp.gather(-1, loc_all[..., kcand:]).squeeze(-1) if kcand < block else torch.full((m, nb), neg, device=c.device)
    return CoarseOut(cand_key.reshape(m, -1), cand_lb.reshape(m, -1), cand_idx.reshape(m, -1),
                     lb_all.amax(-1), rest, c if write_logits else c.new_empty(0, n))


def coarse_head_reference(x, dense, coef, *, bits, group_size, bound, sigma, block, kcand,
                          write_logits=False) -> CoarseOut:
    """The whole coarse pass on the reference path (see the module docstring)."""
    c, b = coarse_values_reference(x, dense, coef, bits=bits, group_size=group_size, bound=bound, sigma=sigma)
    return block_candidates_reference(c, b, block=block, kcand=kcand, write_logits=write_logits)


def exact_logits_chunked(x: torch.Tensor, rows_fn, n: int, chunk: int = 16384) -> torch.Tensor:
    """Exact fp32 logits ``x [B, K] @ W^T`` for all N rows, dequantizing ``chunk`` rows at a time.

    ``rows_fn(lo, hi) -> fp32 [hi - lo, K]`` returns the exact weight rows. Used by the certified
    head's fallback, so the whole fp32 weight never needs to exist at once.
    """
    xf = x.float()
    out = torch.empty(x.shape[0], n, dtype=torch.float32, device=x.device)
    for lo in range(0, n, chunk):
        hi = min(n, lo + chunk)
        out[:, lo:hi] = xf @ rows_fn(lo, hi).t()
    return out


def nblocks(n: int, block: int) -> int:
    return math.ceil(n / block)
