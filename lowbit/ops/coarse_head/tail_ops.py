"""The Triton tails after the coarse pass as registered ops (``custom_op`` + ``register_fake``), so a
draft head compiles with ``torch.compile(fullgraph=True)``: ``lowbit::draft_fast_select``,
``lowbit::draft_certified_select`` and ``lowbit::draft_fused_argmax``. Eager calls go straight to
the launchers (:mod:`.pipeline`); the kernels are imported on first use."""
from __future__ import annotations

import torch


def fast_select_rerank(cand_key: torch.Tensor, cand_idx: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
                       r: int, k: int, kcand: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Fused fast-mode selection: the exact top-``k`` among the ``r`` best coarse candidates
    (values fp32 [M, k] descending, indices int64 [M, k]); ``kcand`` candidates per block as
    emitted by :func:`coarse_head` (0: unknown). Triton only; see :mod:`.fast_select`."""
    from lowbit.ops.coarse_head.fast_select import fast_select_rerank as impl

    return impl(cand_key, cand_idx, x, weight, r, k, kcand)


# mutates_args=(): the kernel's counter buffer is internal scratch that every call leaves at zero
_fast_select_op = torch.library.custom_op("lowbit::draft_fast_select", fast_select_rerank, mutates_args=())


@_fast_select_op.register_fake
def _(cand_key, cand_idx, x, weight, r, k, kcand=0):
    m = cand_key.shape[0]
    return (cand_key.new_empty(m, k, dtype=torch.float32), cand_key.new_empty(m, k, dtype=torch.int64))


def certified_select_rerank(cand_key: torch.Tensor, cand_lb: torch.Tensor, cand_idx: torch.Tensor,
                            block_lb: torch.Tensor, block_rest: torch.Tensor, x: torch.Tensor,
                            weight: torch.Tensor, k: int, cap: int, block: int, stats: torch.Tensor
                            ) -> tuple[torch.Tensor, torch.Tensor]:
    """Certified mode's exact top-``k`` from the certified coarse outputs (blocks of ``block``
    tokens), without a host synchronization (values fp32 [M, k], indices int64 [M, k]); ``stats``
    (int64, see :mod:`.certified_tail`) accumulates in place. Triton only."""
    from lowbit.ops.coarse_head.certified_tail import certified_select_rerank as impl

    return impl(cand_key, cand_lb, cand_idx, block_lb, block_rest, x, weight, k, cap, block, stats)


_certified_op = torch.library.custom_op("lowbit::draft_certified_select", certified_select_rerank,
                                        mutates_args=("stats",))


@_certified_op.register_fake
def _(cand_key, cand_lb, cand_idx, block_lb, block_rest, x, weight, k, cap, block, stats):
    m = cand_key.shape[0]
    return (cand_key.new_empty(m, k, dtype=torch.float32), cand_key.new_empty(m, k, dtype=torch.int64))


def fused_certified_argmax(x: torch.Tensor, weight: torch.Tensor, norms: torch.Tensor, cap: int,
                           stats: torch.Tensor) -> torch.Tensor:
    """Certified exact argmax (int64 [M]) of ``x [M, K] @ weight[N, K]^T`` in one launch, the
    stored rows as their own coarse pass; ``norms`` fp32 [N] the rows' 2-norms rounded up
    (:func:`~.selection.row_norms`); ``stats`` (int64 ``CERTIFIED_STATS``) accumulates in place.
    Triton only, no host synchronization."""
    from lowbit.ops.coarse_head.fused_argmax import fused_argmax

    return fused_argmax(x, weight, norms, cap, stats)


_fused_argmax_op = torch.library.custom_op("lowbit::draft_fused_argmax", fused_certified_argmax,
                                           mutates_args=("stats",))


@_fused_argmax_op.register_fake
def _(x, weight, norms, cap, stats):
    return x.new_empty(x.shape[0], dtype=torch.int64)


__all__ = ["certified_select_rerank", "fast_select_rerank", "fused_certified_argmax"]
