"""Small building blocks of the tiny model: seeded linears, RMSNorm, RoPE, the SwiGLU MLP."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def make_linear(in_features: int, out_features: int, fmt: str, gen: torch.Generator) -> nn.Module:
    """A bias-free ``lowbit.nn.Linear`` with seeded N(0, 1/in_features) weights, quantized to ``fmt``.

    ``"fp8"``: e4m3 with 128x128 block scales (``act_quant`` + ``fp8_gemm``); ``"fp4"``: packed E2M1
    with UE8M0 1x32 scales (``act_quant`` + ``fp4_gemm``); ``"bf16"``: ``F.linear``.
    """
    from lowbit.nn import Linear

    dense = nn.Linear(in_features, out_features, bias=False, device="meta")  # no default init
    w = torch.randn(out_features, in_features, generator=gen) * in_features**-0.5
    dense.weight = nn.Parameter(w.to(torch.bfloat16), requires_grad=False)
    return Linear.from_float(dense, fmt)


def seeded(shape, gen: torch.Generator, std: float = 1.0, mean: float = 0.0, dtype=torch.float32) -> nn.Parameter:
    """A frozen parameter drawn from N(mean, std^2) with ``gen`` (CPU; move the model afterwards)."""
    return nn.Parameter((torch.randn(*shape, generator=gen) * std + mean).to(dtype), requires_grad=False)


class RMSNorm(nn.Module):
    """``x / rms(x) * weight`` in fp32, returned in x's dtype. weight [dim] fp32."""

    def __init__(self, dim: int, eps: float, gen: torch.Generator):
        super().__init__()
        self.eps = eps
        # 1 + noise rather than ones, so a checkpoint round trip that mixes up two norms is caught
        self.weight = seeded((dim,), gen, std=0.1, mean=1.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x.float(), (x.shape[-1],), self.weight, self.eps).to(x.dtype)


def rope_tables(rope_dim: int, max_seq_len: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin fp32 ``[max_seq_len, rope_dim/2]`` for position p and frequency theta^(-2i/rope_dim)."""
    inv_freq = theta ** (-torch.arange(0, rope_dim, 2, dtype=torch.float64) / rope_dim)
    angles = torch.arange(max_seq_len, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return angles.cos().float(), angles.sin().float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rope_dim: int, inverse: bool = False) -> torch.Tensor:
    """Rotate the last ``rope_dim`` dims of ``x [b, s, ..., d]`` by position (half-split pairs
    ``(x_i, x_{i+rope_dim/2})``); cos/sin ``[s, rope_dim/2]``. ``inverse`` rotates back by the same
    angle: applied to an attention output it turns the RoPE'd value dims back into position-free
    ones (the values are the keys in MQA with a shared KV row). Returns a new tensor in x's dtype."""
    bcast = (1, x.shape[1]) + (1,) * (x.dim() - 3) + (rope_dim // 2,)
    c, s = cos.view(bcast), sin.view(bcast)
    if inverse:
        s = -s
    x1, x2 = x[..., -rope_dim:].float().chunk(2, dim=-1)
    rotated = torch.cat([x1 * c - x2 * s, x1 * s + x2 * c], dim=-1).to(x.dtype)
    return torch.cat([x[..., :-rope_dim], rotated], dim=-1)


class MLP(nn.Module):
    """SwiGLU: ``w2(silu(w1 x) * w3 x)``. w1 / w3 are column-parallel, w2 row-parallel."""

    def __init__(self, dim: int, inter_dim: int, fmt: str, gen: torch.Generator):
        super().__init__()
        self.w1 = make_linear(dim, inter_dim, fmt, gen)
        self.w2 = make_linear(inter_dim, dim, fmt, gen)
        self.w3 = make_linear(dim, inter_dim, fmt, gen)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.silu(self.w1(x).float()) * self.w3(x).float()
        return self.w2(h.to(x.dtype))
