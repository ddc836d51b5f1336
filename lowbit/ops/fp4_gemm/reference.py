"""Pure-PyTorch definition of ``fp4_gemm`` (no Triton): FP8 activations x MXFP4-style weights.

``C = A @ B^T`` with A e4m3 ``[M, K]`` (1x128 scales) and B packed E2M1 ``[N, K/2]`` with UE8M0
1x32 scales. The spec's per-32 two-level sum, ``acc += dot32 * a_s[m, k//128] * b_s[n, k//32]``,
is computed here per 128 block with the weight scale folded into the fp32 weight first:
``e2m1 * 2^e`` is exact in fp32, so this is the same sum, only grouped differently.
"""
from __future__ import annotations

import torch

from lowbit.formats.e2m1 import e2m1_unpack
from lowbit.ops.act_quant.reference import scale_to_f32

A_BLOCK = 128
B_BLOCK = 32


def fp4_weight_dequant_ref(b: torch.Tensor, b_s: torch.Tensor) -> torch.Tensor:
    """Packed E2M1 ``[N, K/2]`` (uint8 or float4_e2m1fn_x2) x UE8M0 ``[N, K/32]`` -> fp32 ``[N, K]``."""
    vals = e2m1_unpack(b)
    n, k = vals.shape
    return (vals.view(n, k // B_BLOCK, B_BLOCK) * scale_to_f32(b_s).unsqueeze(-1)).view(n, k)


def fp4_gemm_ref(a: torch.Tensor, a_s: torch.Tensor, b: torch.Tensor, b_s: torch.Tensor) -> torch.Tensor:
    """a e4m3 ``[..., K]``, a_s ``[..., K/128]``; b packed ``[N, K/2]``, b_s ``[N, K/32]``.
    Returns bf16 ``[..., N]``."""
    k = a.shape[-1]
    af = a.reshape(-1, k).float()
    asf = scale_to_f32(a_s).reshape(-1, k // A_BLOCK)
    bf = fp4_weight_dequant_ref(b, b_s)
    n = bf.shape[0]
    acc = torch.zeros(af.shape[0], n, dtype=torch.float32, device=a.device)
    for kb in range(k // A_BLOCK):
        sl = slice(kb * A_BLOCK, (kb + 1) * A_BLOCK)
        acc += (af[:, sl] @ bf[:, sl].T) * asf[:, kb, None]
    return acc.to(torch.bfloat16).reshape(*a.shape[:-1], n)
