"""Pure-PyTorch hyper-connection split + Sinkhorn normalisation (the spec, and the CPU path)."""
from __future__ import annotations

import torch


def hc_split_sinkhorn_reference(
    mixes: torch.Tensor,
    hc_scale: torch.Tensor,
    hc_base: torch.Tensor,
    hc_mult: int = 4,
    sinkhorn_iters: int = 20,
    eps: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Split ``mixes [b, s, (2+hc)*hc]`` into ``pre [b, s, hc]``, ``post [b, s, hc]``, ``comb [b, s, hc, hc]``.

    pre  = sigmoid(mixes[..., :hc] * scale[0] + base[:hc]) + eps
    post = 2 * sigmoid(mixes[..., hc:2hc] * scale[1] + base[hc:2hc])
    comb = mixes[..., 2hc:].view(hc, hc) * scale[2] + base[2hc:]   (row-major: comb[i, j] = mixes[2hc + i*hc + j])
    comb = softmax(comb, rows) + eps;  comb /= colsum + eps;
    repeat iters-1 times: comb /= rowsum + eps; comb /= colsum + eps.
    Computes in mixes' dtype (fp32; fp64 for tests).
    """
    hc = hc_mult
    scale = hc_scale.to(mixes.dtype)
    base = hc_base.to(mixes.dtype)
    pre = torch.sigmoid(mixes[..., :hc] * scale[0] + base[:hc]) + eps
    post = 2 * torch.sigmoid(mixes[..., hc : 2 * hc] * scale[1] + base[hc : 2 * hc])
    comb = mixes[..., 2 * hc :] * scale[2] + base[2 * hc :]
    comb = comb.unflatten(-1, (hc, hc))
    comb = torch.softmax(comb, dim=-1) + eps
    comb = comb / (comb.sum(dim=-2, keepdim=True) + eps)
    for _ in range(sinkhorn_iters - 1):
        comb = comb / (comb.sum(dim=-1, keepdim=True) + eps)
        comb = comb / (comb.sum(dim=-2, keepdim=True) + eps)
    return pre.contiguous(), post.contiguous(), comb.contiguous()
