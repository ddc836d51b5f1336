"""Pure-PyTorch definition of ``fp8_gemm`` (no Triton): block-scaled FP8 GEMM, ``C = A @ B^T``.

Two-level accumulation, as the kernel does: per 128-wide K block ``kb``,
``acc += (f32(A[:, kb]) @ f32(B[:, kb])^T) * a_s[:, kb, None] * b_s[n // 128, kb]`` in fp32; the
result is cast to bf16 once at the end.
"""
from __future__ import annotations

import torch

from lowbit.ops.act_quant.reference import scale_to_f32

BLOCK = 128


def fp8_gemm_ref(a: torch.Tensor, a_s: torch.Tensor, b: torch.Tensor, b_s: torch.Tensor) -> torch.Tensor:
    """a e4m3 ``[..., K]``, a_s ``[..., K/128]``; b e4m3 ``[N, K]``, b_s ``[ceil(N/128), K/128]``
    (scales fp32 or UE8M0). Returns bf16 ``[..., N]``."""
    k = a.shape[-1]
    n = b.shape[0]
    af = a.reshape(-1, k).float()
    asf = scale_to_f32(a_s).reshape(-1, k // BLOCK)
    bf = b.float()
    bsf = scale_to_f32(b_s).repeat_interleave(BLOCK, 0)[:n]  # [N, K/128]
    acc = torch.zeros(af.shape[0], n, dtype=torch.float32, device=a.device)
    for kb in range(k // BLOCK):
        sl = slice(kb * BLOCK, (kb + 1) * BLOCK)
        acc += (af[:, sl] @ bf[:, sl].T) * asf[:, kb, None] * bsf[None, :, kb]
    return acc.to(torch.bfloat16).reshape(*a.shape[:-1], n)
