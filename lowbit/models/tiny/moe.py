"""Routed mixture of experts: a sigmoid top-k router, FP4 routed experts and an FP8 shared expert."""
from __future__ import annotations

import torch
from torch import nn

from lowbit.models.tiny.config import TinyConfig
from lowbit.models.tiny.layers import MLP, seeded


class Gate(nn.Module):
    """DeepSeek-V3 style router: ``s = sigmoid(x @ W^T)`` (fp32), experts chosen by ``s + bias``
    (the load-balancing bias only steers the choice), weights ``s[chosen] / sum * route_scale``."""

    def __init__(self, cfg: TinyConfig, gen: torch.Generator):
        super().__init__()
        self.topk, self.route_scale = cfg.n_activated_experts, cfg.route_scale
        self.weight = seeded((cfg.n_experts, cfg.dim), gen, std=cfg.dim**-0.5)
        self.bias = seeded((cfg.n_experts,), gen, std=0.1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x [T, dim] -> (weights [T, topk] fp32, indices [T, topk] int64)."""
        scores = torch.sigmoid(x.float() @ self.weight.t())
        indices = torch.topk(scores + self.bias, self.topk, dim=-1).indices
        weights = scores.gather(1, indices)
        return weights / weights.sum(dim=-1, keepdim=True) * self.route_scale, indices


class MoE(nn.Module):
    """``y = sum_{e in topk} w_e * expert_e(x) + shared(x)``.

    Routed experts use ``cfg.expert_fmt`` (FP4 by default: ``act_quant`` + ``fp4_gemm``); under
    tensor parallelism each rank holds whole experts. The shared expert is dense FP8, split like
    any MLP (w1 / w3 by rows, w2 by columns).
    """

    def __init__(self, cfg: TinyConfig, gen: torch.Generator):
        super().__init__()
        self.gate = Gate(cfg, gen)
        self.experts = nn.ModuleList(MLP(cfg.dim, cfg.moe_inter_dim, cfg.expert_fmt, gen) for _ in range(cfg.n_experts))
        self.shared_experts = MLP(cfg.dim, cfg.n_shared_experts * cfg.moe_inter_dim, cfg.dense_fmt, gen)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [b, s, dim] bf16 -> [b, s, dim] bf16. Each expert runs once on the rows routed to it."""
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        weights, indices = self.gate(x)
        y = self.shared_experts(x).float()
        for e, expert in enumerate(self.experts):
            rows, slot = torch.where(indices == e)
            if rows.numel() == 0:
                continue
            y.index_add_(0, rows, expert(x[rows]).float() * weights[rows, slot, None])
        return y.to(x.dtype).view(shape)
