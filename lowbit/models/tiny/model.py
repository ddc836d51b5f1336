"""The tiny DeepSeek-style decoder: hyper-connected blocks of sparse attention and a routed MoE.

::

    tokens ─ embed ─ repeat over hc_mult streams ─┬─ Block 0 ─ ... ─ Block L-1 ─ hc_head ─ norm ─ head ─ logits
                                                  │
    Block:  [ngram memory] ─ hc_pre ─ RMSNorm ─ Attention ─ hc_post ─ hc_pre ─ RMSNorm ─ MoE ─ hc_post

Hyper-connections (mHC): the residual is ``hc_mult`` streams ``X [b, s, hc, dim]``. Around each
sub-layer F, ``mixes = (flatten(X) @ fn^T) / rms(flatten(X))`` and ``hc_split_sinkhorn`` turns
the mixes into ``pre [hc]``, ``post [hc]`` and a doubly-stochastic ``comb [hc, hc]``; then
``y = F(sum_i pre_i X_i)`` and ``X'_j = post_j * y + sum_i comb_ij X_i``.

Which kernel each piece drives: every dense linear is FP8 (``act_quant`` + ``fp8_gemm``), routed
experts FP4 (``act_quant`` + ``fp4_gemm``), attention ``sparse_attn`` over an FP8 KV cache
(``act_quant(inplace=True)``), the indexer ``act_quant``, the mixing ``hc_split_sinkhorn``, the
n-gram memory ``gathered_rows`` on an MXFP4 table.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from lowbit._validate import check_tensor, require
from lowbit.models.tiny.attention import Attention
from lowbit.models.tiny.config import TinyConfig
from lowbit.models.tiny.layers import RMSNorm, make_linear, rope_tables, seeded
from lowbit.models.tiny.moe import MoE
from lowbit.models.tiny.ngram import NgramMemory


class HyperConnection(nn.Module):
    """The mHC parameters around one sub-layer: ``fn [(2+hc)*hc, hc*dim]``, ``scale [3]``, ``base``."""

    def __init__(self, cfg: TinyConfig, gen: torch.Generator):
        super().__init__()
        self.cfg = cfg
        hc = cfg.hc_mult
        self.fn = seeded((cfg.hc_mix_dim, hc * cfg.dim), gen, std=(hc * cfg.dim) ** -0.5)
        self.scale = seeded((3,), gen, std=0.1, mean=1.0)
        self.base = seeded((cfg.hc_mix_dim,), gen)

    def pre(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x [b, s, hc, dim] -> (sub-layer input [b, s, dim] in x's dtype, post [b, s, hc], comb [b, s, hc, hc])."""
        from lowbit.ops.hc_sinkhorn import hc_split_sinkhorn

        cfg = self.cfg
        flat = x.flatten(2).float()
        mixes = F.linear(flat, self.fn) * torch.rsqrt(flat.square().mean(-1, keepdim=True) + cfg.norm_eps)
        pre, post, comb = hc_split_sinkhorn(mixes, self.scale, self.base, cfg.hc_mult, cfg.hc_sinkhorn_iters, cfg.hc_eps)
        y = (pre.unsqueeze(-1) * x.float()).sum(dim=2)
        return y.to(x.dtype), post, comb

    @staticmethod
    def post(y: torch.Tensor, residual: torch.Tensor, post: torch.Tensor, comb: torch.Tensor) -> torch.Tensor:
        """``X'_j = post_j * y + sum_i comb_ij X_i``: y [b, s, dim], residual [b, s, hc, dim]."""
        mixed = torch.einsum("bsij,bsid->bsjd", comb, residual.float())
        return (post.unsqueeze(-1) * y.float().unsqueeze(2) + mixed).to(residual.dtype)


class Block(nn.Module):
    def __init__(self, layer_id: int, cfg: TinyConfig, gen: torch.Generator):
        super().__init__()
        self.ngram = NgramMemory(cfg, gen) if layer_id in cfg.ngram_layers else None
        self.hc_attn = HyperConnection(cfg, gen)
        self.attn_norm = RMSNorm(cfg.dim, cfg.norm_eps, gen)
        self.attn = Attention(cfg, gen)
        self.hc_ffn = HyperConnection(cfg, gen)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps, gen)
        self.ffn = MoE(cfg, gen)

    def forward(self, x, history, start_pos, cos, sin):
        """x [b, s, hc, dim] bf16 streams -> the same shape."""
        if self.ngram is not None:
            x = self.ngram(x, history, start_pos)
        h, post, comb = self.hc_attn.pre(x)
        x = self.hc_attn.post(self.attn(self.attn_norm(h), start_pos, cos, sin), x, post, comb)
        h, post, comb = self.hc_ffn.pre(x)
        return self.hc_ffn.post(self.ffn(self.ffn_norm(h)), x, post, comb)


class TinyModel(nn.Module):
    """A tiny DeepSeek-style decoder with random, seeded weights and its own caches.

    ``model(tokens [b, s], start_pos)`` runs positions ``start_pos .. start_pos+s-1`` and returns
    fp32 logits ``[b, s, vocab]``: ``start_pos=0`` is a prefill (the caches are overwritten from
    position 0), then one call per decoded token with ``s=1``. Weights are drawn on the CPU from a
    ``torch.Generator`` seeded with ``seed``, so the same seed gives the same model everywhere;
    move it with ``.to(device)``.
    """

    def __init__(self, cfg: TinyConfig | None = None, seed: int = 0):
        super().__init__()
        cfg = cfg or TinyConfig()
        self.cfg = cfg
        gen = torch.Generator().manual_seed(seed)
        self.embed = nn.Embedding(cfg.vocab_size, cfg.dim, _weight=torch.randn(cfg.vocab_size, cfg.dim, generator=gen).bfloat16())
        self.embed.weight.requires_grad_(False)
        self.layers = nn.ModuleList(Block(i, cfg, gen) for i in range(cfg.n_layers))
        self.hc_head_fn = seeded((cfg.hc_mult, cfg.hc_mult * cfg.dim), gen, std=(cfg.hc_mult * cfg.dim) ** -0.5)
        self.hc_head_scale = seeded((1,), gen, std=0.1, mean=1.0)
        self.hc_head_base = seeded((cfg.hc_mult,), gen)
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps, gen)
        self.head = make_linear(cfg.dim, cfg.vocab_size, cfg.head_fmt, gen)
        cos, sin = rope_tables(cfg.rope_dim, cfg.max_seq_len, cfg.rope_theta)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.register_buffer("history", torch.zeros(cfg.max_batch_size, cfg.max_seq_len, dtype=torch.int64), persistent=False)
        self.requires_grad_(False)  # an inference model: no autograd anywhere

    @property
    def device(self) -> torch.device:
        return self.embed.weight.device

    def hc_head(self, x: torch.Tensor) -> torch.Tensor:
        """Reduce the streams to one: ``sum_i (sigmoid(mix_i * scale + base_i) + eps) X_i``."""
        cfg = self.cfg
        flat = x.flatten(2).float()
        mixes = F.linear(flat, self.hc_head_fn) * torch.rsqrt(flat.square().mean(-1, keepdim=True) + cfg.norm_eps)
        pre = torch.sigmoid(mixes * self.hc_head_scale + self.hc_head_base) + cfg.hc_eps
        return (pre.unsqueeze(-1) * x.float()).sum(dim=2).to(x.dtype)

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor, start_pos: int = 0) -> torch.Tensor:
        """tokens [b, s] int32/int64 at positions start_pos .. start_pos+s-1 -> logits [b, s, vocab] fp32.
        Writes the caches (KV, indexer keys, token history) at those positions for rows 0 .. b-1."""
        cfg = self.cfg
        check_tensor("tokens", tokens, dtypes=(torch.int32, torch.int64), ndim=2)
        b, s = tokens.shape
        require(1 <= b <= cfg.max_batch_size, f"batch {b} (tokens {tuple(tokens.shape)}) must be in [1, max_batch_size={cfg.max_batch_size}]")
        require(s >= 1 and 0 <= start_pos and start_pos + s <= cfg.max_seq_len,
                f"positions {start_pos}..{start_pos + s - 1} (tokens {tuple(tokens.shape)}) must lie in [0, max_seq_len={cfg.max_seq_len})")
        require(tokens.device == self.device, f"tokens are on {tokens.device}, the model on {self.device}")
        lo, hi = int(tokens.min()), int(tokens.max())  # a host sync per call: fine for a reference model
        require(0 <= lo and hi < cfg.vocab_size, f"token ids must lie in [0, {cfg.vocab_size}), got min {lo}, max {hi}")
        end = start_pos + s
        self.history[:b, start_pos:end] = tokens
        cos, sin = self.rope_cos[start_pos:end], self.rope_sin[start_pos:end]
        x = self.embed(tokens).unsqueeze(2).repeat(1, 1, cfg.hc_mult, 1)  # [b, s, hc, dim]
        for layer in self.layers:
            x = layer(x, self.history[:b], start_pos, cos, sin)
        return self.head(self.norm(self.hc_head(x))).float()
