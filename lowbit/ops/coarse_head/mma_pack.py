"""The INTx codes re-tiled for the ``mma.sync`` coarse pass (:mod:`.mma_f16`): pure PyTorch, built
once per packing (:meth:`lowbit.ops.coarse_head.packing.CoarsePacking.mma_tiled`). The layout is
described in :mod:`.mma_f16`'s module docstring."""
from __future__ import annotations

import torch

#: words per row per K step (64 bytes: one g64 group of each plane)
STEP_WORDS = 16


def mma_tile(packed: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, bits: int, group_size: int):
    """Re-tile INTx plane-split tensors for :func:`coarse_mma`. ``packed`` uint8 [N, L] (L % 4 ==
    0), ``scale`` fp16 / ``zero`` uint8 [N, NG]. Returns (words int32 [NR, NS, 4, 32, 4],
    scale-zero int32 [NR, NG, 32]) with NR = ceil(N / 32), NS = ceil(L / 64); zero past N and past
    a row's words. The scale-zero word holds the fp16 scale in its low half and, in its high
    half, the fp16 ``1024 + z 2^(bits j)`` (j: the group's plane; an integer <= 2047, exact) that
    the kernel subtracts times the step's sum of x."""
    n, ell = packed.shape
    if ell % 4:
        raise ValueError(f"mma_tile: the packed rows must hold whole int32 words, got L = {ell}")
    nr = -(-n // 32)
    ns = -(-(ell // 4) // STEP_WORDS)
    w = torch.zeros(nr * 32, ns * STEP_WORDS, dtype=torch.int32, device=packed.device)
    w[:n, : ell // 4] = packed.contiguous().view(torch.int32)
    # row = 32 b + 16 t + 8 rh + g, word = 16 s + 8 qh + 4 qi + c  ->  [b, s, (t, qh), (g, c), (qi, rh)]
    w = w.view(nr, 2, 2, 8, ns, 2, 2, 4).permute(0, 4, 1, 5, 3, 7, 6, 2).reshape(nr, ns, 4, 32, 4).contiguous()
    ng = scale.shape[1]
    plane = torch.arange(ng, device=packed.device) * group_size // ell  # [NG]
    zz = (1024 + (zero.to(torch.int32) << (bits * plane)[None, :])).to(torch.float16)
    sz = torch.zeros(nr * 32, ng, dtype=torch.int32, device=packed.device)
    sz[:n] = (scale.contiguous().view(torch.int16).to(torch.int32) & 0xFFFF) | (zz.view(torch.int16).to(torch.int32) << 16)
    sz = sz.view(nr, 32, scale.shape[1]).transpose(1, 2).contiguous()
    return w, sz


__all__ = ["STEP_WORDS", "mma_tile"]
