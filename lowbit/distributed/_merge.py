"""Exact top-k merge of (value, global index) pairs with a total order: the PyTorch reference.

The order is: larger value first; equal values by lower index. It is made total by packing each
pair into one int64 key whose signed order *is* that order, so a top-k over keys has no ties to
break (every real key is distinct because every global index is) and the result does not depend
on how ``torch.topk`` or the all-gather order candidates. The key is also what crosses the wire:
8 bytes a pair instead of 4 + 8.

Key layout (int64)::

    bits 63..32: ord(value)   the fp32 bit pattern mapped to a signed int32 with the same order
    bits 31..0 : 2^32 - 1 - index   (so a lower index gives a larger key among equal values)

``ord(v) = b if b >= 0 else b ^ 0x7FFFFFFF`` on the signed bit pattern ``b`` (negative floats
have their magnitude bits flipped so that more negative is smaller). ``-0.0`` (``b = -2^31``) is
first turned into ``+0.0`` so the two zeros tie (and break by index) as ``==`` says they should.
Decoding gives back the exact fp32 value (bit for bit, except the zero's sign) and the index.
NaN has no place in this order (a positive NaN sorts above +inf, a negative one below -inf); it
is never produced for finite inputs and is not otherwise handled. Indices must lie in
``[0, 2^32 - 1)``. Padding is the key of ``(-inf, 2^32 - 1)``: below every real pair.

The Triton kernels in ``_triton.py`` compute the same keys bit for bit.
"""
from __future__ import annotations

import torch

from lowbit._validate import check_tensor, require

MAX_INDEX = (1 << 32) - 1  # exclusive; also the padding index (its key is the smallest low word)
_LOW_MASK = (1 << 32) - 1
_MAG_MASK = 0x7FFFFFFF
_NEG_ZERO_BITS = -(1 << 31)
# ord(-inf) = 0xFF800000 ^ 0x7FFFFFFF as int32, shifted up; low word MAX_INDEX - MAX_INDEX = 0
PAD_KEY = (-(1 << 31) + 0x007FFFFF) << 32


def encode_keys(values: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """Pack fp32 ``values`` and int64 ``indices`` (same shape) into order-preserving int64 keys."""
    bits = values.float().view(torch.int32)
    bits = torch.where(bits == _NEG_ZERO_BITS, torch.zeros_like(bits), bits)
    ordered = torch.where(bits >= 0, bits, bits ^ _MAG_MASK).to(torch.int64)
    return (ordered << 32) | (MAX_INDEX - indices.to(torch.int64))


def decode_keys(keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Inverse of :func:`encode_keys`: ``(values fp32, indices int64)``."""
    ordered = (keys >> 32).to(torch.int32)  # arithmetic shift keeps the sign
    bits = torch.where(ordered >= 0, ordered, ordered ^ _MAG_MASK)
    return bits.view(torch.float32), MAX_INDEX - (keys & _LOW_MASK)


def top_keys(keys: torch.Tensor, k: int) -> torch.Tensor:
    """The ``k`` largest keys of each row of ``keys [M, n]``, largest first.

    Keys of distinct indices are distinct, so this is a total order and ``torch.topk``'s
    unspecified tie handling never matters (identical padding keys are interchangeable).
    """
    return torch.topk(keys, k, dim=-1, largest=True, sorted=True).values


def encode_pad(values: torch.Tensor, indices: torch.Tensor, vocab_start: int, k: int) -> torch.Tensor:
    """A rank's keys: ``values fp32 [M, kk]``, local ``indices int64 [M, kk]`` (``kk <= k``)
    -> int64 ``[M, k]``, global index ``vocab_start + index``, columns ``kk..k-1`` = ``PAD_KEY``."""
    keys = encode_keys(values, indices + vocab_start)
    if keys.shape[1] == k:
        return keys
    out = torch.full((keys.shape[0], k), PAD_KEY, dtype=torch.int64, device=keys.device)
    out[:, : keys.shape[1]] = keys
    return out


def merge_gathered(gathered: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The top ``k`` of every rank's keys: ``gathered int64 [world, M, kr]`` (``k <= world*kr``)
    -> ``(values fp32 [M, k], indices int64 [M, k])``, descending, ties by lower index."""
    world, m, kr = gathered.shape
    keys = gathered.permute(1, 0, 2).reshape(m, world * kr)  # column order is irrelevant
    return decode_keys(top_keys(keys, k))


def merge_topk(values: torch.Tensor, indices: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact top-``k`` of candidate pairs, sorted descending, ties broken by lower index.

    values fp32 ``[M, n]``, indices int64 ``[M, n]`` (distinct within a row, in
    ``[0, 2^32 - 1)``), ``1 <= k <= n``. Returns ``(values fp32 [M, k], indices int64 [M, k])``.
    Inputs are not mutated. This is the merge :class:`ParallelDraftHead` applies to the gathered
    per-rank candidates; it is exposed for engines that compute the local top-k themselves.
    """
    check_tensor("values", values, dtypes=(torch.float32,), ndim=2)
    check_tensor("indices", indices, dtypes=(torch.int64,), ndim=2)
    require(values.shape == indices.shape,
            f"values {tuple(values.shape)} and indices {tuple(indices.shape)} must have the same shape")
    require(values.device == indices.device, f"values on {values.device}, indices on {indices.device}")
    require(1 <= k <= values.shape[1], f"k={k} must be in [1, {values.shape[1]}] for candidates {tuple(values.shape)}")
    return decode_keys(top_keys(encode_keys(values, indices), k))
