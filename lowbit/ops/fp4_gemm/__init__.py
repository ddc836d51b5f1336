"""``fp4_gemm``: FP8 activations x packed-E2M1 weights with UE8M0 1x32 scales, ``C = A @ B^T`` -> bf16.

Hopper has no FP4 tensor cores, but every E2M1 value is an E4M3 value: the kernels upcast the
weight to E4M3 in registers (exact) and feed the FP8 tensor cores; which kernel runs for which M
and GPU is decided in ``dispatch.py`` (``dispatch_table()``; docs/gemm.md). Registered as
``lowbit::fp4_gemm`` (used under ``torch.compile``; bypassed in eager mode).
"""
from __future__ import annotations

import torch

from lowbit._backend import use_triton
from lowbit._validate import check_tensor, require
from lowbit.ops.fp4_gemm.reference import fp4_gemm_ref

__all__ = ["fp4_gemm"]

_FP4X2 = getattr(torch, "float4_e2m1fn_x2", None)
_PACKED_DTYPES = (torch.uint8,) + ((_FP4X2,) if _FP4X2 is not None else ())


def _impl(a: torch.Tensor, a_s: torch.Tensor, b: torch.Tensor, b_s: torch.Tensor) -> torch.Tensor:
    if a.numel() == 0 or b.shape[0] == 0:  # M = 0 or N = 0 (empty MoE experts): no launch
        return a.new_empty((*a.shape[:-1], b.shape[0]), dtype=torch.bfloat16)
    if use_triton(a, a_s, b, b_s):
        from lowbit.ops.fp4_gemm import dispatch

        k = a.shape[-1]
        c = dispatch.fp4_gemm(a.reshape(-1, k).contiguous(), a_s.reshape(-1, k // 128).contiguous(),
                              b.view(torch.uint8).contiguous(), b_s.view(torch.uint8).contiguous())
        return c.reshape(*a.shape[:-1], b.shape[0])
    return fp4_gemm_ref(a, a_s, b, b_s)


@torch.library.custom_op("lowbit::fp4_gemm", mutates_args=())
def _fp4_gemm_op(a: torch.Tensor, a_s: torch.Tensor, b: torch.Tensor, b_s: torch.Tensor) -> torch.Tensor:
    return _impl(a, a_s, b, b_s)


@_fp4_gemm_op.register_fake
def _(a, a_s, b, b_s):
    return a.new_empty((*a.shape[:-1], b.shape[0]), dtype=torch.bfloat16)


def validate(a, a_s, b, b_s) -> None:
    check_tensor("a", a, dtypes=(torch.float8_e4m3fn,))
    check_tensor("a_s", a_s, dtypes=(torch.float32, torch.float8_e8m0fnu))
    check_tensor("b", b, dtypes=_PACKED_DTYPES, ndim=2)
    check_tensor("b_s", b_s, dtypes=(torch.float8_e8m0fnu, torch.uint8), ndim=2)
    require(a.dim() >= 1, f"a must have at least 1 dim, got shape {tuple(a.shape)}")
    k = a.shape[-1]
    n = b.shape[0]
    require(k > 0 and k % 128 == 0, f"K = a.shape[-1] = {k} must be a positive multiple of 128 (a {tuple(a.shape)})")
    require(b.shape[1] * 2 == k, f"packed b has shape {tuple(b.shape)}, expected [N, {k // 2}] (K/2 bytes) to match a {tuple(a.shape)}")
    want_as = (*a.shape[:-1], k // 128)
    require(tuple(a_s.shape) == want_as, f"a_s has shape {tuple(a_s.shape)}, expected {want_as} (1x128 scales of a {tuple(a.shape)})")
    require(tuple(b_s.shape) == (n, k // 32), f"b_s has shape {tuple(b_s.shape)}, expected {(n, k // 32)} (1x32 UE8M0 scales of b)")
    devs = {t.device for t in (a, a_s, b, b_s)}
    require(len(devs) == 1, f"a, a_s, b, b_s must be on one device, got {[str(t.device) for t in (a, a_s, b, b_s)]}")


def fp4_gemm(a: torch.Tensor, a_s: torch.Tensor, b: torch.Tensor, b_s: torch.Tensor) -> torch.Tensor:
    """``C = A @ B^T`` in bf16.

    a: float8_e4m3fn ``[..., K]`` (K % 128 == 0), a_s fp32 (or float8_e8m0fnu) ``[..., K/128]``;
    b: packed E2M1 ``[N, K/2]`` uint8 or ``torch.float4_e2m1fn_x2`` (element 2i in the LOW nibble),
    b_s UE8M0 ``[N, K/32]`` (``torch.float8_e8m0fnu`` or uint8 exponent bytes).
    Math: per 32-wide K block ``acc += dot(a, e2m1(b)) * a_s[m, k // 128] * 2^(b_s[n, k // 32] - 127)``
    in fp32; bf16 at the end. Returns a new bf16 ``[..., N]``; nothing is mutated.

    Empty shapes: M = 0 (any leading dim of ``a`` is 0) or N = 0 returns an empty bf16
    ``[..., N]`` without a launch; K = 0 is a ``ValueError`` (K must be a positive multiple of 128).

    On the GPU from ``dispatch.EXPAND_MIN_M`` (512) rows on where ``M * N * K >=
    dispatch.EXPAND_MIN_MNK`` (2^35; 2^33 inside CUDA-graph capture), the weight is re-encoded per
    call into a temporary E4M3 ``[N, K]`` copy (``expand.py``) for the FP8 GEMM; the fused kernel
    follows as a launch that computes only where that re-encoding was not exact (decided on the
    device: no host wait, CUDA graphs capture it).
    """
    validate(a, a_s, b, b_s)
    if _FP4X2 is not None and b.dtype == _FP4X2:
        b = b.view(torch.uint8)
    if torch.compiler.is_compiling():
        return torch.ops.lowbit.fp4_gemm(a, a_s, b, b_s)
    return _impl(a, a_s, b, b_s)

