"""Gathered low-bit projection (SPEC §3): decode only the rows an index selects.

Public functions (weights: a dense bf16/fp16/fp32 ``[V, K]`` tensor, or ``lowbit.formats.FP8``
with ``granularity="row"``, ``NVFP4``, ``MXFP4``, ``INTx``):

* :func:`gathered_dot` ``(x [B, K], weight, index [B, T]) -> [B, T] fp32``.
* :func:`gathered_bias` ``(x, weight, values [B, T], index [B, T], logits [B, V], alpha)``:
  ``logits[b, index[b,t]] = values[b,t] + alpha * dot(x[b], W[index[b,t]])`` in place.
* :func:`gathered_rows` ``(weight, index, dtype) -> [*index.shape, K]``: a low-bit embedding lookup.

Each is validated here (``ValueError`` before any launch), then runs a ``torch.library`` op
(``lowbit::gathered_dot`` / ``lowbit::gathered_bias`` / ``lowbit::gathered_rows``) whose
implementation picks Triton for CUDA tensors and the PyTorch reference elsewhere
(:func:`lowbit._backend.use_triton`); which Triton kernel runs is decided in ``dispatch.py``
(``dispatch_table()``). In eager mode the op wrapper is bypassed (it costs several
µs of Python per call, which is the whole budget of a small gathered projection); under
``torch.compile`` the registered op is traced, so ``fullgraph=True`` and CUDA graphs work.

Index range: indices must lie in ``[0, V)``. The reference path always checks (``ValueError``).
The kernel path checks only in debug mode (:func:`set_debug` or ``LOWBIT_DEBUG=1``), because the
check reads the index back to the host (a sync, and illegal inside CUDA-graph capture). Without
debug mode the kernel never touches memory for an out-of-range index: ``gathered_dot`` gives NaN
there, ``gathered_rows`` a NaN row, and ``gathered_bias`` writes nothing for it.

Duplicate indices within a row of ``gathered_bias``: every occurrence writes the same logit; one
write wins (it is not a sum). When the duplicates carry equal ``values`` (e.g. the same token
twice), every write is the same number, so the result is well defined.
"""
from __future__ import annotations

import os
from typing import Optional

import torch

from lowbit._backend import use_triton
from lowbit._validate import overlaps_itself
from lowbit.formats.fp8 import FP8
from lowbit.formats.intx import INTx
from lowbit.formats.mxfp4 import MXFP4
from lowbit.formats.nvfp4 import NVFP4
from lowbit.ops.gathered import reference as _ref
from lowbit.ops.gathered.reference import DENSE, FORMAT_NAMES, FP8_ROW, INTX, MXFP4_CODE, NVFP4_CODE

__all__ = ["gathered_bias", "gathered_dot", "gathered_rows", "get_debug", "set_debug", "unpack_weight"]

_FLOAT = (torch.bfloat16, torch.float16, torch.float32)
_INDEX = (torch.int32, torch.int64)
_debug = os.environ.get("LOWBIT_DEBUG", "0") not in ("", "0")


def set_debug(flag: bool) -> None:
    """Turn the kernel-path index range check on or off (off by default; ``LOWBIT_DEBUG=1``)."""
    global _debug
    _debug = bool(flag)


def get_debug() -> bool:
    return _debug


# ---------------------------------------------------------------------------------------------
# validation


def _fail(msg: str):
    raise ValueError(msg)


def unpack_weight(weight):
    """Split a weight into ``(fmt, data, scale, aux, V, K, bits, group_size)``, validating it: the
    form the kernels (``dispatch.py``) take."""
    if isinstance(weight, torch.Tensor):
        if weight.dim() != 2:
            _fail(f"dense weight must be 2-D [V, K], got shape {tuple(weight.shape)}")
        if weight.dtype not in _FLOAT:
            _fail(f"dense weight has dtype {weight.dtype}; expected one of {list(_FLOAT)} "
                  "(wrap e4m3 data in lowbit.formats.FP8 with its row scales)")
        return DENSE, weight, None, None, weight.shape[0], weight.shape[1], 0, 0
    if isinstance(weight, FP8):
        if weight.granularity != "row":
            _fail(f"FP8 weight granularity must be 'row' for the gathered ops, got {weight.granularity!r}")
        if weight.data.dim() != 2:
            _fail(f"FP8 weight data must be 2-D [V, K], got shape {tuple(weight.data.shape)}")
        return FP8_ROW, weight.data.view(torch.uint8), weight.scale, None, weight.data.shape[0], weight.data.shape[1], 0, 0
    if isinstance(weight, NVFP4):
        k = weight.packed.shape[1] * 2
        if weight.group_size != 16:
            _fail(f"NVFP4 group size must be 16, got {weight.group_size}")
        if k % 16 != 0:
            _fail(f"NVFP4 needs K % 16 == 0, got K={k}")
        if weight.global_scale.dim() != 0 or weight.global_scale.dtype != torch.float32:
            _fail(f"NVFP4 global_scale must be a 0-d fp32 tensor, got shape {tuple(weight.global_scale.shape)} "
                  f"dtype {weight.global_scale.dtype}")
        return NVFP4_CODE, weight.packed, weight.scale.view(torch.uint8), weight.global_scale, weight.packed.shape[0], k, 4, 16
    if isinstance(weight, MXFP4):
        k = weight.packed.shape[1] * 2
        if weight.group_size != 32:
            _fail(f"MXFP4 group size must be 32, got {weight.group_size}")
        if k % 32 != 0:
            _fail(f"MXFP4 needs K % 32 == 0, got K={k}")
        return MXFP4_CODE, weight.packed, weight.scale, None, weight.packed.shape[0], k, 4, 32
    if isinstance(weight, INTx):
        return INTX, weight.packed, weight.scale, weight.zero, weight.packed.shape[0], weight.k, weight.bits, weight.group_size
    _fail(f"weight must be a dense tensor, FP8 (row), NVFP4, MXFP4 or INTx, got {type(weight).__name__}")


def _check(name, t, dtypes, ndim=None):
    if not isinstance(t, torch.Tensor):
        _fail(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in dtypes:
        _fail(f"{name} has dtype {t.dtype}; expected one of {list(dtypes)}")
    if ndim is not None and t.dim() != ndim:
        _fail(f"{name} must have {ndim} dims, got shape {tuple(t.shape)}")


def _check_devices(**tensors):
    named = {k: v for k, v in tensors.items() if isinstance(v, torch.Tensor)}
    if len({str(v.device) for v in named.values()}) > 1:
        _fail("tensors must be on one device: " + ", ".join(f"{k} on {v.device}" for k, v in named.items()))


def _check_x_index(x, index, k):
    _check("x", x, _FLOAT, 2)
    _check("index", index, _INDEX, 2)
    if x.shape[1] != k:
        _fail(f"x has shape {tuple(x.shape)} but the weight has K={k}")
    if index.shape[0] != x.shape[0]:
        _fail(f"index has shape {tuple(index.shape)} but x has B={x.shape[0]} rows")


def _check_table(index: torch.Tensor, v: int) -> None:
    """A weight with V = 0 rows has no valid index: refuse a non-empty index on every path (a
    shape check, no sync; the kernel path would otherwise return its out-of-range filler)."""
    if v == 0 and index.numel() > 0:
        _fail(f"the weight has V = 0 rows, so no index is in range; got index of shape {tuple(index.shape)}")


def _check_range(index: torch.Tensor, v: int) -> None:
    """``ValueError`` naming the first index outside ``[0, V)`` (reads the index on the host)."""
    if index.numel() == 0:
        return
    bad = (index < 0) | (index >= v)
    if bool(bad.any()):
        first = index[bad].reshape(-1)[0].item()
        _fail(f"index value {first} is out of range [0, {v}) ({int(bad.sum())} bad entries)")


# ---------------------------------------------------------------------------------------------
# torch.library ops: a format crosses the boundary as (fmt code, data, scale, aux, k, bits, group).
# E4M3 tensors cross as uint8 views (no copy): opcheck's schema check compares tensors with
# allclose, which has no float8 kernel, and the Triton kernels decode E4M3 bits themselves anyway.


def _kernels():
    from lowbit.ops.gathered import dispatch

    return dispatch


def _dot_impl(x, data, scale, aux, index, fmt, k, bits, group_size):
    tensors = (x, data, scale, aux, index)
    if use_triton(*tensors):
        if _debug:
            _check_range(index, data.shape[0])
        return _kernels().gathered_dot(x, fmt, data, scale, aux, index, k, bits, group_size)
    _check_range(index, data.shape[0])
    return _ref.gathered_dot(x, fmt, data, scale, aux, index, k, bits, group_size)


def _bias_impl(x, data, scale, aux, values, index, logits, alpha, fmt, k, bits, group_size):
    tensors = (x, data, scale, aux, values, index, logits)
    if use_triton(*tensors):
        if _debug:
            _check_range(index, data.shape[0])
        _kernels().gathered_bias(x, fmt, data, scale, aux, values, index, logits, alpha, k, bits, group_size)
        return
    _check_range(index, data.shape[0])
    _ref.gathered_bias(x, fmt, data, scale, aux, values, index, logits, alpha, k, bits, group_size)


def _rows_impl(data, scale, aux, index, fmt, k, bits, group_size, dtype):
    if use_triton(data, scale, aux, index):
        if _debug:
            _check_range(index, data.shape[0])
        return _kernels().gathered_rows(fmt, data, scale, aux, index, k, bits, group_size, dtype)
    _check_range(index, data.shape[0])
    return _ref.gathered_rows(fmt, data, scale, aux, index, k, bits, group_size, dtype)


@torch.library.custom_op("lowbit::gathered_dot", mutates_args=())
def _gathered_dot_op(
    x: torch.Tensor, data: torch.Tensor, scale: Optional[torch.Tensor], aux: Optional[torch.Tensor],
    index: torch.Tensor, fmt: int, k: int, bits: int, group_size: int,
) -> torch.Tensor:
    return _dot_impl(x, data, scale, aux, index, fmt, k, bits, group_size)


@_gathered_dot_op.register_fake
def _(x, data, scale, aux, index, fmt, k, bits, group_size):
    return x.new_empty(index.shape, dtype=torch.float32)


@torch.library.custom_op("lowbit::gathered_bias", mutates_args=("logits",))
def _gathered_bias_op(
    x: torch.Tensor, data: torch.Tensor, scale: Optional[torch.Tensor], aux: Optional[torch.Tensor],
    values: torch.Tensor, index: torch.Tensor, logits: torch.Tensor, alpha: float,
    fmt: int, k: int, bits: int, group_size: int,
) -> None:
    _bias_impl(x, data, scale, aux, values, index, logits, alpha, fmt, k, bits, group_size)


@_gathered_bias_op.register_fake
def _(x, data, scale, aux, values, index, logits, alpha, fmt, k, bits, group_size):
    return None


@torch.library.custom_op("lowbit::gathered_rows", mutates_args=())
def _gathered_rows_op(
    data: torch.Tensor, scale: Optional[torch.Tensor], aux: Optional[torch.Tensor], index: torch.Tensor,
    fmt: int, k: int, bits: int, group_size: int, dtype: torch.dtype,
) -> torch.Tensor:
    return _rows_impl(data, scale, aux, index, fmt, k, bits, group_size, dtype)


@_gathered_rows_op.register_fake
def _(data, scale, aux, index, fmt, k, bits, group_size, dtype):
    return data.new_empty((*index.shape, k), dtype=dtype)


def _eager() -> bool:
    return not torch.compiler.is_compiling()


# ---------------------------------------------------------------------------------------------
# public functions


def gathered_dot(x: torch.Tensor, weight, index: torch.Tensor) -> torch.Tensor:
    """Dot products of ``x`` with the rows of ``weight`` that ``index`` selects.

    x ``[B, K]`` bf16/fp16/fp32; weight: dense ``[V, K]`` bf16/fp16/fp32 (any row/column strides,
    e.g. ``W[::2]``) or FP8 (row) / NVFP4 / MXFP4 / INTx; index ``[B, T]`` int32/int64 in
    ``[0, V)``. Returns fp32 ``[B, T]``, ``out[b, t] = sum_k x[b, k] * W[index[b, t], k]`` with
    the rows dequantized per the format (SPEC §2) and fp32 accumulation. Nothing is mutated.

    Empty shapes: B = 0 or T = 0 give an empty ``[B, T]``; K = 0 (dense or INTx weights) gives
    zeros (an empty sum); a weight with V = 0 rows and a non-empty index is a ``ValueError``.
    """
    fmt, data, scale, aux, v, k, bits, gs = unpack_weight(weight)
    _check_x_index(x, index, k)
    _check_table(index, v)
    _check_devices(x=x, weight=data, weight_scale=scale, weight_aux=aux, index=index)
    if _eager():
        return _dot_impl(x, data, scale, aux, index, fmt, k, bits, gs)
    return torch.ops.lowbit.gathered_dot(x, data, scale, aux, index, fmt, k, bits, gs)


def gathered_bias(x: torch.Tensor, weight, values: torch.Tensor, index: torch.Tensor,
                  logits: torch.Tensor, alpha: float = 1.0) -> torch.Tensor:
    """Add ``alpha * W[index] @ x`` to the selected logits, in place; return ``logits``.

    x ``[B, K]`` bf16/fp16/fp32; weight as in :func:`gathered_dot`; values ``[B, T]``
    bf16/fp16/fp32 (the base logits of the selected entries); index ``[B, T]`` int32/int64 in
    ``[0, V)``; logits ``[B, V]`` bf16/fp16/fp32, any strides.
    ``logits[b, index[b,t]] = values[b,t] + alpha * dot(x[b], W[index[b,t]])`` (fp32 math, one
    rounding to ``logits.dtype``); every other entry of ``logits`` is untouched. Mutates
    ``logits`` only (never ``values`` or ``x``). Duplicate indices: see the module docstring.
    ``logits`` must not overlap itself (an expanded / stride-0 view): ``ValueError``.

    Empty shapes: B = 0 or T = 0 write nothing; K = 0 writes ``values`` (an empty dot); a weight
    with V = 0 rows and a non-empty index is a ``ValueError``.
    """
    fmt, data, scale, aux, v, k, bits, gs = unpack_weight(weight)
    _check_x_index(x, index, k)
    _check("values", values, _FLOAT, 2)
    _check("logits", logits, _FLOAT, 2)
    if values.shape != index.shape:
        _fail(f"values has shape {tuple(values.shape)} but index has shape {tuple(index.shape)}")
    if logits.shape[0] != x.shape[0] or logits.shape[1] != v:
        _fail(f"logits has shape {tuple(logits.shape)}; expected ({x.shape[0]}, {v}) = (B, V)")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
        _fail(f"alpha must be a Python float, got {type(alpha).__name__}")
    if overlaps_itself(logits):
        _fail(f"logits (shape {tuple(logits.shape)}, strides {tuple(logits.stride())}) has elements that share "
              "memory (an expanded or stride-0 view): it is written in place, so pass a tensor whose elements "
              "are distinct, e.g. logits.clone()")
    _check_table(index, v)
    _check_devices(x=x, weight=data, weight_scale=scale, weight_aux=aux, values=values, index=index, logits=logits)
    if _eager():
        _bias_impl(x, data, scale, aux, values, index, logits, float(alpha), fmt, k, bits, gs)
    else:
        torch.ops.lowbit.gathered_bias(x, data, scale, aux, values, index, logits, float(alpha), fmt, k, bits, gs)
    return logits


def gathered_rows(weight, index: torch.Tensor, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """The dequantized rows ``W[index]``: ``[*index.shape, K]`` in ``dtype`` (bf16/fp16/fp32).

    A low-bit embedding lookup: only the selected rows are read and decoded (fp32 decode, one
    rounding to ``dtype``), the table is never materialized. index: int32/int64, any shape, values
    in ``[0, V)``. Nothing is mutated. An empty index gives ``[*index.shape, K]`` with no
    element; a weight with V = 0 rows and a non-empty index is a ``ValueError``.
    """
    fmt, data, scale, aux, v, k, bits, gs = unpack_weight(weight)
    _check("index", index, _INDEX)
    _check_table(index, v)
    if not isinstance(dtype, torch.dtype) or dtype not in _FLOAT:
        _fail(f"dtype must be one of {list(_FLOAT)}, got {dtype}")
    _check_devices(weight=data, weight_scale=scale, weight_aux=aux, index=index)
    if _eager():
        return _rows_impl(data, scale, aux, index, fmt, k, bits, gs, dtype)
    return torch.ops.lowbit.gathered_rows(data, scale, aux, index, fmt, k, bits, gs, dtype)


def format_name(weight) -> str:
    """Short name of a weight's format ("dense", "fp8-row", "nvfp4", "mxfp4", "intx")."""
    return FORMAT_NAMES[unpack_weight(weight)[0]]
