"""Sparse MQA attention: a sliding window plus the top-k older positions an FP8 indexer picks.

Per query at absolute position t the attended set is
``{t-window+1, ..., t}`` (the window; negative positions are -1) ``∪ top-index_topk of {0, ..., t-window}``
ranked by the indexer. Positions never repeat, and never exceed t (causal). ``sparse_attn`` then
attends over exactly those rows of the KV cache, with a per-head sink logit.

Caches (per layer, ``[max_batch, max_seq_len, ...]``, not in the state dict):

* ``kv_cache`` bf16: the KV row after ``kv_norm`` and RoPE, with its non-RoPE part passed through
  FP8 (``act_quant(..., inplace=True)``: quantize-dequantize, as an FP8 KV cache stores it).
* ``Indexer.k_cache`` e4m3 + ``k_scale`` fp32: the indexer keys exactly as ``act_quant`` returns them.
"""
from __future__ import annotations

import torch
from torch import nn

from lowbit.models.tiny.config import TinyConfig
from lowbit.models.tiny.layers import RMSNorm, apply_rope, make_linear, seeded


class Indexer(nn.Module):
    """Ranks past positions for each query with FP8 dot products (DeepSeek's lightning indexer).

    ``score[t, j] = sum_h w[t, h] * relu(qs[t, h] * ks[j] * (q8[t, h] . k8[j]))`` with
    ``(q8, qs) = act_quant(q)``, ``(k8, ks) = act_quant(k)`` (one scale per head row) and
    ``w = weights_proj(x) / sqrt(index_heads * index_head_dim)``. RoPE rotates the last
    ``rope_dim`` dims (all of them at the default 64). The dot products are taken
    on the raw e4m3 values (exact products in fp32) and scaled afterwards, as an FP8 kernel would.
    """

    def __init__(self, cfg: TinyConfig, gen: torch.Generator):
        super().__init__()
        self.cfg = cfg
        self.n_heads, self.head_dim = cfg.index_heads, cfg.index_head_dim
        self.rope_dim = cfg.rope_dim  # the attention's RoPE tables; index_head_dim >= rope_dim
        self.wq = make_linear(cfg.dim, self.n_heads * self.head_dim, cfg.dense_fmt, gen)
        self.wk = make_linear(cfg.dim, self.head_dim, cfg.dense_fmt, gen)
        self.k_norm = RMSNorm(self.head_dim, cfg.norm_eps, gen)
        self.weights_proj = make_linear(cfg.dim, self.n_heads, "bf16", gen)
        shape = (cfg.max_batch_size, cfg.max_seq_len)
        self.register_buffer("k_cache", torch.zeros(*shape, self.head_dim, dtype=torch.float8_e4m3fn), persistent=False)
        self.register_buffer("k_scale", torch.zeros(*shape, 1), persistent=False)

    def forward(self, x: torch.Tensor, start_pos: int, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """x [b, s, dim] bf16 -> topk_idxs [b, s, index_topk] int64, -1 where there is no candidate."""
        from lowbit.ops.act_quant import act_quant

        b, s, _ = x.shape
        end = start_pos + s
        q = apply_rope(self.wq(x).view(b, s, self.n_heads, self.head_dim), cos, sin, self.rope_dim)
        k = apply_rope(self.k_norm(self.wk(x)).unsqueeze(2), cos, sin, self.rope_dim).squeeze(2)
        q8, qs = act_quant(q.contiguous(), self.head_dim)  # [b, s, h, d] e4m3, [b, s, h, 1]
        k8, ks = act_quant(k.contiguous(), self.head_dim)  # [b, s, d] e4m3, [b, s, 1]
        self.k_cache[:b, start_pos:end] = k8
        self.k_scale[:b, start_pos:end] = ks
        dots = torch.einsum("bshd,btd->bsht", q8.float(), self.k_cache[:b, :end].float())
        dots = dots * qs * self.k_scale[:b, :end, 0][:, None, None, :]
        w = self.weights_proj(x).float() * (self.n_heads * self.head_dim) ** -0.5
        scores = (torch.relu(dots) * w.unsqueeze(-1)).sum(dim=2)  # [b, s, end]
        # only positions older than the window are candidates (the window is always attended)
        t = torch.arange(start_pos, end, device=x.device)[:, None]
        j = torch.arange(end, device=x.device)[None, :]
        scores = scores.masked_fill(j > t - self.cfg.window, float("-inf"))
        # a stable sort ranks exact ties (e.g. all-zero relu sums) by position, the same way in a
        # one-token decode call as in a full prefill; torch.topk gives no such promise
        values, order = torch.sort(scores, dim=-1, descending=True, stable=True)
        k_top = self.cfg.index_topk
        values, order = values[..., :k_top], order[..., :k_top]
        idx = torch.where(values > float("-inf"), order, torch.full_like(order, -1))
        if idx.shape[-1] < k_top:  # fewer positions than index_topk so far
            idx = torch.cat([idx, idx.new_full((b, s, k_top - idx.shape[-1]), -1)], dim=-1)
        return idx


class Attention(nn.Module):
    """MQA with one shared KV row per position (key = value), RoPE on the last ``rope_dim`` dims,
    an FP8 KV cache and a learnt per-head sink; attends over window + indexer positions."""

    def __init__(self, cfg: TinyConfig, gen: torch.Generator):
        super().__init__()
        self.cfg = cfg
        self.n_heads, self.head_dim, self.rope_dim = cfg.n_heads, cfg.head_dim, cfg.rope_dim
        self.softmax_scale = self.head_dim**-0.5
        self.wq = make_linear(cfg.dim, self.n_heads * self.head_dim, cfg.dense_fmt, gen)  # column-parallel
        self.wkv = make_linear(cfg.dim, self.head_dim, cfg.dense_fmt, gen)  # replicated (one KV head)
        self.kv_norm = RMSNorm(self.head_dim, cfg.norm_eps, gen)
        self.wo = make_linear(self.n_heads * self.head_dim, cfg.dim, cfg.dense_fmt, gen)  # row-parallel
        self.attn_sink = seeded((self.n_heads,), gen)  # split with the heads
        self.indexer = Indexer(cfg, gen) if cfg.index_topk > 0 else None
        self.register_buffer("kv_cache", torch.zeros(cfg.max_batch_size, cfg.max_seq_len, self.head_dim, dtype=torch.bfloat16),
                             persistent=False)

    def positions(self, x: torch.Tensor, start_pos: int, cos, sin) -> torch.Tensor:
        """topk_idxs [b, s, window + index_topk] int32 for queries at start_pos .. start_pos+s-1."""
        b, s, _ = x.shape
        t = torch.arange(start_pos, start_pos + s, device=x.device)[:, None]
        window = t - torch.arange(self.cfg.window - 1, -1, -1, device=x.device)[None, :]
        window = torch.where(window >= 0, window, torch.full_like(window, -1)).expand(b, s, -1)
        if self.indexer is None:
            return window.to(torch.int32).contiguous()
        return torch.cat([window, self.indexer(x, start_pos, cos, sin)], dim=-1).to(torch.int32)

    def forward(self, x: torch.Tensor, start_pos: int, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """x [b, s, dim] bf16 (normalised); cos/sin [s, rope_dim/2] for these positions. Writes the
        KV (and indexer) cache at start_pos .. start_pos+s-1 and returns [b, s, dim] bf16."""
        from lowbit.ops.act_quant import act_quant
        from lowbit.ops.sparse_attn import sparse_attn

        b, s, _ = x.shape
        end = start_pos + s
        q = apply_rope(self.wq(x).view(b, s, self.n_heads, self.head_dim), cos, sin, self.rope_dim)
        kv = apply_rope(self.kv_norm(self.wkv(x)).unsqueeze(2), cos, sin, self.rope_dim).squeeze(2)
        # FP8 KV cache: the RoPE dims stay bf16 (they carry position and are the most sensitive)
        nope = self.head_dim - self.rope_dim
        kv_nope = act_quant(kv[..., :nope].contiguous(), self.cfg.kv_block, inplace=True)
        self.kv_cache[:b, start_pos:end] = torch.cat([kv_nope, kv[..., nope:]], dim=-1)
        topk_idxs = self.positions(x, start_pos, cos, sin)
        o = sparse_attn(q.contiguous(), self.kv_cache[:b, :end], self.attn_sink, topk_idxs, self.softmax_scale)
        o = apply_rope(o, cos, sin, self.rope_dim, inverse=True)
        return self.wo(o.flatten(2))
