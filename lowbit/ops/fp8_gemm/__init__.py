"""``fp8_gemm``: block-scaled FP8 GEMM (DeepSeek layout), ``C = A @ B^T`` -> bf16.

Registered as ``lowbit::fp8_gemm`` (used under ``torch.compile``; bypassed in eager mode to save
the dispatch cost at decode sizes). CUDA tensors run a Triton / Gluon kernel on the FP8 tensor
cores, chosen by M and GPU in ``dispatch.py`` (``dispatch_table()``); CPU tensors the PyTorch
reference.
"""
from __future__ import annotations

import torch

from lowbit._backend import use_triton
from lowbit._validate import check_tensor, require
from lowbit.ops.fp8_gemm.reference import fp8_gemm_ref

__all__ = ["fp8_gemm"]

_SCALE_DTYPES = (torch.float32, torch.float8_e8m0fnu)


def _impl(a: torch.Tensor, a_s: torch.Tensor, b: torch.Tensor, b_s: torch.Tensor) -> torch.Tensor:
    if a.numel() == 0 or b.shape[0] == 0:  # M = 0 or N = 0 (empty MoE experts): no launch
        return a.new_empty((*a.shape[:-1], b.shape[0]), dtype=torch.bfloat16)
    if use_triton(a, a_s, b, b_s):
        from lowbit.ops.fp8_gemm import dispatch

        k = a.shape[-1]
        c = dispatch.fp8_gemm(a.reshape(-1, k).contiguous(), a_s.reshape(-1, k // 128).contiguous(), b.contiguous(),
                              b_s.contiguous())
        return c.reshape(*a.shape[:-1], b.shape[0])
    return fp8_gemm_ref(a, a_s, b, b_s)


@torch.library.custom_op("lowbit::fp8_gemm", mutates_args=())
def _fp8_gemm_op(a: torch.Tensor, a_s: torch.Tensor, b: torch.Tensor, b_s: torch.Tensor) -> torch.Tensor:
    return _impl(a, a_s, b, b_s)


@_fp8_gemm_op.register_fake
def _(a, a_s, b, b_s):
    return a.new_empty((*a.shape[:-1], b.shape[0]), dtype=torch.bfloat16)


def validate(a, a_s, b, b_s) -> None:
    check_tensor("a", a, dtypes=(torch.float8_e4m3fn,))
    check_tensor("a_s", a_s, dtypes=_SCALE_DTYPES)
    check_tensor("b", b, dtypes=(torch.float8_e4m3fn,), ndim=2)
    check_tensor("b_s", b_s, dtypes=_SCALE_DTYPES, ndim=2)
    require(a.dim() >= 1, f"a must have at least 1 dim, got shape {tuple(a.shape)}")
    k = a.shape[-1]
    n = b.shape[0]
    require(k > 0 and k % 128 == 0, f"K = a.shape[-1] = {k} must be a positive multiple of 128 (a {tuple(a.shape)})")
    require(b.shape[1] == k, f"b has shape {tuple(b.shape)}, expected [N, {k}] to match a {tuple(a.shape)}")
    want_as = (*a.shape[:-1], k // 128)
    require(tuple(a_s.shape) == want_as, f"a_s has shape {tuple(a_s.shape)}, expected {want_as} (1x128 scales of a {tuple(a.shape)})")
    want_bs = (-(-n // 128), k // 128)
    require(tuple(b_s.shape) == want_bs, f"b_s has shape {tuple(b_s.shape)}, expected {want_bs} (128x128 scales of b {tuple(b.shape)})")
    devs = {t.device for t in (a, a_s, b, b_s)}
    require(len(devs) == 1, f"a, a_s, b, b_s must be on one device, got {[str(t.device) for t in (a, a_s, b, b_s)]}")


def fp8_gemm(a: torch.Tensor, a_s: torch.Tensor, b: torch.Tensor, b_s: torch.Tensor) -> torch.Tensor:
    """``C = A @ B^T`` in bf16 with DeepSeek block scales.

    a: float8_e4m3fn ``[..., K]`` (K % 128 == 0) with a_s ``[..., K/128]`` (one scale per 1x128);
    b: float8_e4m3fn ``[N, K]`` with b_s ``[ceil(N/128), K/128]`` (one per 128x128 tile).
    Scales are fp32 or ``torch.float8_e8m0fnu``. Per 128-wide K block the kernel adds
    ``dot(a, b) * a_s * b_s`` to an fp32 accumulator (two-level accumulation) and casts to bf16 at
    the end. Returns a new bf16 ``[..., N]``; nothing is mutated.

    Empty shapes: M = 0 (any leading dim of ``a`` is 0) or N = 0 returns an empty bf16
    ``[..., N]`` without a launch; K = 0 is a ``ValueError`` (K must be a positive multiple of 128).
    """
    validate(a, a_s, b, b_s)
    if torch.compiler.is_compiling():
        return torch.ops.lowbit.fp8_gemm(a, a_s, b, b_s)
    return _impl(a, a_s, b, b_s)

