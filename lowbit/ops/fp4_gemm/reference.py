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


#: the widest shift of a 1x32 group below its 128 x 128 block's largest scale that stays exact
#: in E4M3 (E2M1 x 2^(6 - d): 0.5 x 2^-8 and 1.5 x 2^-8 are the smallest such values, d = 14)
FAR_SHIFT = 14


def fp4_weight_to_fp8_ref(b: torch.Tensor, b_s: torch.Tensor):
    """Packed E2M1 ``[N, K/2]`` with UE8M0 ``[N, K/32]`` -> ``(q, qs, bad)``: q float8_e4m3fn
    ``[N, K]``, qs fp32 ``[ceil(N/128), K/128]`` (``fp8_gemm``'s 128 x 128 weight blocks), bad a
    bool scalar tensor.

    Block (i, j) has E = the largest scale byte of its 128 rows x 4 groups (255 left out);
    ``qs = 2^(E - 133)`` and each group with byte e stores ``e2m1 * 2^(6 - (E - e))``, so
    ``q * qs = e2m1 * 2^(e - 127)``: the dequantized weight, exact while ``E - e <= FAR_SHIFT``.
    ``bad`` is set when a group holding a nonzero code sits further below its block's largest
    scale, or any scale byte is 255 (NaN): the expansion is then not the weight and must not be
    used."""
    vals = e2m1_unpack(b)
    n, k = vals.shape
    e = b_s.view(torch.uint8).long()
    nb = -(-n // 128)
    ep = torch.zeros(nb * 128, k // B_BLOCK, dtype=torch.long, device=e.device)
    ep[:n] = e.masked_fill(e == 255, 0)
    big = ep.view(nb, 128, k // 128, 4).amax(dim=(1, 3))  # [nb, K/128]
    shift = big.repeat_interleave(128, 0)[:n].repeat_interleave(4, 1) - e  # [N, K/32]
    q = (vals.view(n, k // B_BLOCK, B_BLOCK).double() * torch.pow(2.0, (6 - shift).double()).unsqueeze(-1))
    q = q.view(n, k).to(torch.float8_e4m3fn)
    qs = torch.pow(2.0, (big - 133).double()).float()
    nonzero = vals.view(n, k // B_BLOCK, B_BLOCK).ne(0).any(-1)
    bad = ((shift > FAR_SHIFT) & nonzero).any() | (e == 255).any()
    return q, qs, bad
