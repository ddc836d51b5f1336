"""The draft head's ops: coarse pass, selection, certification, exact rescoring.

Layout (data flows down this list; each file has one job):

* :mod:`.reference` -- the pure-PyTorch definition of the coarse pass and its error bounds;
* :mod:`.packing` -- the coarse copy of a head (:class:`CoarsePacking`, :func:`pack`);
* :mod:`.dispatch` -- which kernel and configuration serve a call (one table);
* :mod:`.coarse` -- :func:`coarse_head`, the coarse pass as a registered op;
* the coarse kernels: :mod:`.wgmma_int8` (Gluon, sm_90; with :mod:`.x_int8`, :mod:`.wgmma_pack`,
  :mod:`.wgmma_emit`), :mod:`.mma_f16` (with :mod:`.mma_pack`), :mod:`.gemv_half2` and
  :mod:`.coarse_fp32`, the last three sharing :mod:`.epilogue`;
* the tails: :mod:`.selection` (torch ops), :mod:`.fast_select`, :mod:`.certified_tail`,
  :mod:`.fused_argmax` (sharing :mod:`.exact_keys`, :mod:`.scratch`), registered in
  :mod:`.tail_ops`;
* :mod:`.pipeline` -- coarse -> select or certify -> rescore -> fallback, one function per mode.
"""
from __future__ import annotations

from lowbit.ops.coarse_head import tail_ops  # noqa: F401  (registers the tails' custom ops)
from lowbit.ops.coarse_head.coarse import coarse_head
from lowbit.ops.coarse_head.dispatch import CERTIFIED_MAX_K, FUSED_ARGMAX_MIN_M, coarse_route, dispatch_table
from lowbit.ops.coarse_head.packing import (KIND_FP8, KIND_INTX, KIND_NVFP4, CoarsePacking, exact_logits,
                                            exact_rows_fn, pack, weight_version)
from lowbit.ops.coarse_head.pipeline import (BOUNDS, CERTIFIED_STATS, PIPELINES, HeadConfig, HeadState, HeadStats,
                                             certified_logits, certified_topk, fast_logits, fast_topk)
from lowbit.ops.coarse_head.reference import BOUND_DET, BOUND_NONE, BOUND_STAT, CoarseOut
from lowbit.ops.coarse_head.selection import argmax_lowest, certify, row_norms, select_fast, topk_lowest
from lowbit.ops.coarse_head.tail_ops import certified_select_rerank, fast_select_rerank, fused_certified_argmax

__all__ = [
    "BOUNDS", "BOUND_DET", "BOUND_NONE", "BOUND_STAT", "CERTIFIED_MAX_K", "CERTIFIED_STATS", "FUSED_ARGMAX_MIN_M",
    "KIND_FP8", "KIND_INTX", "KIND_NVFP4", "PIPELINES", "CoarseOut", "CoarsePacking", "HeadConfig", "HeadState",
    "HeadStats", "argmax_lowest", "certified_logits", "certified_select_rerank", "certified_topk", "certify",
    "coarse_head", "coarse_route", "dispatch_table", "exact_logits", "exact_rows_fn", "fast_logits",
    "fast_select_rerank", "fast_topk", "fused_certified_argmax", "pack", "row_norms", "select_fast", "topk_lowest",
    "weight_version",
]
