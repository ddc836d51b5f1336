"""``lowbit.ops.sparse_attn``: top-k sparse attention over a shared (MQA) KV cache, with a sink.

See :func:`sparse_attn`. The Triton kernels live in ``triton.py``; ``reference.py`` is the spec.
"""
from __future__ import annotations

import math
import sys
import types
from typing import Optional

import torch

from lowbit._backend import use_triton
from lowbit._validate import check_same_device, check_tensor, require
from lowbit.ops.sparse_attn.reference import sparse_attn_reference

__all__ = ["sparse_attn", "sparse_attn_reference", "MAX_HEAD_DIM"]

MAX_HEAD_DIM = 512
KV_SCALE_GROUPS = (64, 128)


def _validate(q, kv, attn_sink, topk_idxs, softmax_scale, kv_scale) -> None:
    check_tensor("q", q, dtypes=(torch.bfloat16, torch.float16), ndim=4)
    check_tensor("kv", kv, dtypes=(q.dtype, torch.float8_e4m3fn), ndim=3)
    check_tensor("attn_sink", attn_sink, dtypes=(torch.float32,), ndim=1)
    check_tensor("topk_idxs", topk_idxs, dtypes=(torch.int32, torch.int64), ndim=3)
    require(isinstance(softmax_scale, (int, float)) and not isinstance(softmax_scale, bool),
            f"softmax_scale must be a Python float, got {type(softmax_scale).__name__}")
    require(math.isfinite(softmax_scale), f"softmax_scale must be finite, got {softmax_scale!r}")
    b, m, h, d = q.shape
    require(1 <= d <= MAX_HEAD_DIM, f"head dim d={d} (q shape {tuple(q.shape)}) must be in [1, {MAX_HEAD_DIM}]")
    require(kv.shape[0] == b and kv.shape[2] == d,
            f"kv must be [b={b}, n, d={d}] to match q {tuple(q.shape)}, got {tuple(kv.shape)}")
    require(tuple(attn_sink.shape) == (h,), f"attn_sink must be [h={h}], got {tuple(attn_sink.shape)}")
    require(topk_idxs.shape[:2] == (b, m),
            f"topk_idxs must be [b={b}, m={m}, topk], got {tuple(topk_idxs.shape)}")
    if kv.dtype == torch.float8_e4m3fn:
        require(kv_scale is not None, "kv is float8_e4m3fn: pass its group scales kv_scale [b, n, d/64] or [b, n, d/128]")
        check_tensor("kv_scale", kv_scale, dtypes=(torch.float32,), ndim=3)
        ok = kv_scale.shape[:2] == kv.shape[:2] and any(
            d % g == 0 and kv_scale.shape[2] == d // g for g in KV_SCALE_GROUPS)
        require(ok, f"kv_scale must be [b, n, d/64] or [b, n, d/128] for kv {tuple(kv.shape)}, got {tuple(kv_scale.shape)}")
    else:
        require(kv_scale is None, f"kv_scale is only for a float8_e4m3fn kv; kv has dtype {kv.dtype}")
    check_same_device(q=q, kv=kv, attn_sink=attn_sink, topk_idxs=topk_idxs, kv_scale=kv_scale)


def _impl(q, kv, attn_sink, topk_idxs, softmax_scale, kv_scale):
    if use_triton(q, kv, attn_sink, topk_idxs, kv_scale):
        from lowbit.ops.sparse_attn.triton import sparse_attn_triton

        return sparse_attn_triton(q, kv, attn_sink, topk_idxs, softmax_scale, kv_scale)
    return sparse_attn_reference(q, kv, attn_sink, topk_idxs, softmax_scale, kv_scale)


@torch.library.custom_op("lowbit::sparse_attn", mutates_args=())
def _sparse_attn_op(
    q: torch.Tensor,
    kv: torch.Tensor,
    attn_sink: torch.Tensor,
    topk_idxs: torch.Tensor,
    softmax_scale: float,
    kv_scale: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    return _impl(q, kv, attn_sink, topk_idxs, softmax_scale, kv_scale)


@_sparse_attn_op.register_fake
def _(q, kv, attn_sink, topk_idxs, softmax_scale, kv_scale=None):
    return q.new_empty(q.shape)


def sparse_attn(
    q: torch.Tensor,
    kv: torch.Tensor,
    attn_sink: torch.Tensor,
    topk_idxs: torch.Tensor,
    softmax_scale: float,
    kv_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """Top-k sparse MQA attention with a value-less sink logit per head. Returns a new tensor.

    q [b, m, h, d] bf16 (or fp16); kv [b, n, d] in q's dtype — each row is both key and value —
    or float8_e4m3fn with ``kv_scale`` fp32 [b, n, d/64] or [b, n, d/128] (group scales as
    ``FP8.quantize(kv, "group", 64)`` / ``act_quant`` produce; decoded in the kernel);
    attn_sink [h] fp32; topk_idxs [b, m, topk] int32 or int64; d <= 512.

    ``s_j = softmax_scale * q[b, m, h] . kv[b, idx_j]`` for valid ``idx_j`` (in ``[0, n)``; -1 marks
    "no row" and contributes nothing; duplicates count once per occurrence), then
    ``o = sum_j exp(s_j) kv[b, idx_j] / (sum_j exp(s_j) + exp(attn_sink[h]))`` — the sink joins the
    denominator only and is not multiplied by ``softmax_scale``. fp32 online softmax. Output
    o [b, m, h, d] in q's dtype. Nothing is mutated.

    Edge semantics (identical on every backend): a query with no valid index (including
    ``n = 0`` or ``topk = 0``) gets zeros, never NaN, whatever the sink. A NaN ``attn_sink[h]``
    gives NaN for every other query of head h (the denominator is NaN); ``+inf`` gives zeros (the
    sink takes all the weight); ``-inf`` is no sink. ``softmax_scale`` must be finite
    (``ValueError`` otherwise). Empty ``b``, ``m`` or ``h`` give an empty output (no launch);
    ``d`` must be in ``[1, 512]``.
    """
    _validate(q, kv, attn_sink, topk_idxs, softmax_scale, kv_scale)
    softmax_scale = float(softmax_scale)
    if torch.compiler.is_compiling():
        return _sparse_attn_op(q, kv, attn_sink, topk_idxs, softmax_scale, kv_scale)
    # Eager decode kernels take a few µs; the custom-op dispatcher would add more than that.
    return _impl(q, kv, attn_sink, topk_idxs, softmax_scale, kv_scale)


class _CallableModule(types.ModuleType):
    """Importing this package binds ``lowbit.ops.sparse_attn`` to the module, shadowing the
    function of the same name that ``lowbit.ops`` exports lazily; calling the module calls it."""

    def __call__(self, *args, **kwargs):
        return sparse_attn(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
