"""Splitting a vocabulary (the rows of an LM head) over tensor-parallel ranks."""
from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import torch

from lowbit._validate import require


def vocab_boundaries(vocab_size: int, world_size: int, boundaries: Sequence[int] | None = None) -> list[int]:
    """Row boundaries ``[b_0 = 0, b_1, ..., b_world = vocab_size]``; rank r owns ``[b_r, b_{r+1})``.

    By default the engines' even split: ``per = ceil(vocab_size / world_size)``, ``b_r =
    min(r * per, vocab_size)``, so every rank has ``per`` rows but the last, which has fewer (a
    248320 vocabulary at TP 2 gives 124160 a rank; 10 rows at TP 4 give 3, 3, 3, 1). Explicit
    ``boundaries`` (length ``world_size + 1``, non-decreasing, from 0 to ``vocab_size``) give any
    uneven split; empty shards are allowed.
    """
    require(isinstance(world_size, int) and world_size >= 1, f"world_size must be a positive int, got {world_size!r}")
    require(isinstance(vocab_size, int) and vocab_size >= 1, f"vocab_size must be a positive int, got {vocab_size!r}")
    if boundaries is None:
        per = math.ceil(vocab_size / world_size)
        return [min(r * per, vocab_size) for r in range(world_size + 1)]
    b = [int(v) for v in boundaries]
    require(len(b) == world_size + 1, f"boundaries must have world_size + 1 = {world_size + 1} entries, got {len(b)}: {b}")
    require(b[0] == 0 and b[-1] == vocab_size, f"boundaries must run from 0 to vocab_size={vocab_size}, got {b}")
    require(all(x <= y for x, y in zip(b, b[1:])), f"boundaries must be non-decreasing, got {b}")
    return b


def weight_shape(weight) -> tuple[int, int]:
    """``(N, K)`` of a dense ``[N, K]`` tensor or a lowbit format (anything with ``.shape``)."""
    shape = getattr(weight, "shape", None)
    require(shape is not None and len(shape) == 2,
            f"weight must be a 2-D tensor [N, K] or a lowbit format, got {type(weight).__name__} "
            f"with shape {None if shape is None else tuple(shape)}")
    return int(shape[0]), int(shape[1])


def slice_rows(weight, start: int, end: int):
    """Rows ``[start, end)`` of a dense weight or a lowbit format, as views (no copy).

    Formats: every tensor field whose first dim is N is sliced; 0-d fields (a global or
    per-tensor scale) are shared. FP8 with 128x128 block scales needs ``start`` (and ``end``,
    unless it is N) on a block boundary, since a scale tile cannot be split between ranks.
    """
    n, _ = weight_shape(weight)
    require(0 <= start <= end <= n, f"row range [{start}, {end}) is outside [0, {n})")
    if isinstance(weight, torch.Tensor):
        return weight[start:end]
    require(dataclasses.is_dataclass(weight),
            f"cannot slice rows of {type(weight).__name__}: expected a tensor or a lowbit format dataclass")
    if getattr(weight, "granularity", None) == "block":
        bs = weight.block_size
        require(start % bs == 0 and (end % bs == 0 or end == n),
                f"FP8 block-scaled weight (block {bs}) can only be split on multiples of {bs}; got rows [{start}, {end})")
        return dataclasses.replace(weight, data=weight.data[start:end],
                                   scale=weight.scale[start // bs: math.ceil(end / bs)])
    sliced = {}
    for f in dataclasses.fields(weight):
        t = getattr(weight, f.name)
        if not isinstance(t, torch.Tensor) or t.dim() == 0:
            continue
        require(t.shape[0] == n,
                f"{type(weight).__name__}.{f.name} has shape {tuple(t.shape)}; its first dim is not the {n} rows, "
                "so it cannot be split by rows")
        sliced[f.name] = t[start:end]
    return dataclasses.replace(weight, **sliced)


def shard_vocab(weight, rank: int, world_size: int, boundaries: Sequence[int] | None = None):
    """This rank's vocabulary shard of a full LM-head weight.

    weight: dense ``[N, K]`` or a lowbit format (FP8, NVFP4, MXFP4, INTx) over N vocabulary rows.
    Returns ``(shard, vocab_start)`` where ``shard`` holds rows ``[vocab_start, vocab_start +
    rows)`` as *views* of ``weight`` (``.clone()`` them to free the full weight), split as
    :func:`vocab_boundaries` says (even ceil split by default, or explicit ``boundaries``).
    ``weight`` is not mutated.
    """
    n, _ = weight_shape(weight)
    require(isinstance(rank, int) and 0 <= rank < world_size, f"rank must be in [0, {world_size}), got {rank!r}")
    b = vocab_boundaries(n, world_size, boundaries)
    return slice_rows(weight, b[rank], b[rank + 1]), b[rank]
