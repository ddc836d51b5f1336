"""The parallel head's two local steps as ``torch.library`` ops, Triton on CUDA tensors.

* ``lowbit::topk_encode_pad(values [M, kk] fp32, indices [M, kk] int64, vocab_start, k)
  -> keys int64 [M, k]``: before the all-gather (global index = ``vocab_start + index``,
  columns ``kk..k-1`` padded).
* ``lowbit::topk_merge(gathered int64 [world, M, kr], k) -> (values fp32 [M, k], indices
  int64 [M, k])``: after it; descending, ties by lower index.

Both are pure (nothing mutated). The implementation picks Triton for CUDA tensors and the
reference (``_merge.py``) elsewhere (:func:`lowbit._backend.use_triton`); the merge also falls
back to the reference past ``_triton.MAX_MERGE_KEYS`` keys a row. In eager mode the op wrapper
is bypassed (it costs Python time at M = 1, where the whole step is a few µs); under
``torch.compile`` the registered ops are traced.
"""
from __future__ import annotations

import torch

from lowbit._backend import use_triton
from lowbit.distributed import _merge as _ref


def _kernels():
    from lowbit.distributed import _triton

    return _triton


def _encode_impl(values, indices, vocab_start, k):
    if use_triton(values, indices):
        return _kernels().encode_pad(values, indices, vocab_start, k)
    return _ref.encode_pad(values, indices, vocab_start, k)


def _merge_impl(gathered, k):
    if use_triton(gathered) and _kernels().merge_fits(gathered.shape[0], gathered.shape[2]):
        return _kernels().merge_gathered(gathered, k)
    return _ref.merge_gathered(gathered, k)


@torch.library.custom_op("lowbit::topk_encode_pad", mutates_args=())
def _encode_op(values: torch.Tensor, indices: torch.Tensor, vocab_start: int, k: int) -> torch.Tensor:
    return _encode_impl(values, indices, vocab_start, k)


@_encode_op.register_fake
def _(values, indices, vocab_start, k):
    return values.new_empty((values.shape[0], k), dtype=torch.int64)


@torch.library.custom_op("lowbit::topk_merge", mutates_args=())
def _merge_op(gathered: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    return _merge_impl(gathered, k)


@_merge_op.register_fake
def _(gathered, k):
    m = gathered.shape[1]
    return gathered.new_empty((m, k), dtype=torch.float32), gathered.new_empty((m, k), dtype=torch.int64)


def encode_pad(values: torch.Tensor, indices: torch.Tensor, vocab_start: int, k: int) -> torch.Tensor:
    """int64 keys ``[M, k]`` of a rank's sorted local top-``kk`` (see the module docstring)."""
    if torch.compiler.is_compiling():
        return _encode_op(values, indices, vocab_start, k)
    return _encode_impl(values, indices, vocab_start, k)


def merge_gathered(gathered: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top ``k`` of the gathered keys ``[world, M, kr]``: ``(values fp32, indices int64) [M, k]``."""
    if torch.compiler.is_compiling():
        return _merge_op(gathered, k)
    return _merge_impl(gathered, k)
