"""N-gram memory: a hashed lookup table of the last n token ids, stored as MXFP4 and gated into
every residual stream (after DeepSeek's Engram conditional memory).

For each order n and position t, the ids ``tok[t-n+1 .. t]`` (a pad id before the sequence start)
are hashed, ``h = XOR_j (tok[t-j] + 1) * mult[n, j]``, into one of ``p_n`` buckets (``p_n`` prime,
so the multiplicative hash spreads well), and the row ``table[offset_n + h mod p_n]`` is read with
``gathered_rows`` — only the selected MXFP4 rows are decoded. The rows of all orders are
concatenated to ``m [b, s, n_orders * ngram_dim]`` and projected to a key and a value; each stream
``x_i`` gets ``x_i + sigmoid(rms(x_i) . rms(key) / sqrt(dim)) * value``: the memory is added
where it agrees with the current state.
"""
from __future__ import annotations

import torch
from torch import nn

from lowbit.formats.mxfp4 import MXFP4
from lowbit.models.tiny.config import TinyConfig
from lowbit.models.tiny.layers import RMSNorm, make_linear


class NgramMemory(nn.Module):
    def __init__(self, cfg: TinyConfig, gen: torch.Generator):
        super().__init__()
        self.cfg = cfg
        rows = sum(cfg.ngram_buckets)
        table = MXFP4.quantize(torch.randn(rows, cfg.ngram_dim, generator=gen))
        self.register_buffer("table_packed", table.packed)
        self.register_buffer("table_scale", table.scale)
        # derived from the config, so not in the state dict
        self.register_buffer("offsets", torch.tensor([0, *cfg.ngram_buckets[:-1]]).cumsum(0), persistent=False)
        self.register_buffer("buckets", torch.tensor(cfg.ngram_buckets, dtype=torch.int64), persistent=False)
        # odd multipliers below 2^31: (id + 1) * mult stays far inside int64
        mult = torch.randint(0, 2**30, (len(cfg.ngram_orders), max(cfg.ngram_orders)), generator=gen) * 2 + 1
        self.register_buffer("hash_mult", mult)
        width = len(cfg.ngram_orders) * cfg.ngram_dim
        self.key = make_linear(width, cfg.dim, cfg.dense_fmt, gen)
        self.value = make_linear(width, cfg.dim, cfg.dense_fmt, gen)
        self.key_norm = RMSNorm(cfg.dim, cfg.norm_eps, gen)
        self.x_norm = RMSNorm(cfg.dim, cfg.norm_eps, gen)

    @property
    def table(self) -> MXFP4:
        return MXFP4(self.table_packed, self.table_scale)

    def bucket_ids(self, history: torch.Tensor, start_pos: int, end: int) -> torch.Tensor:
        """history [b, >= end] int64 token ids -> table rows [b, end - start_pos, n_orders] int64."""
        pad = self.cfg.vocab_size  # an id no token has: "before the start"
        t = torch.arange(start_pos, end, device=history.device)
        out = []
        for o, n in enumerate(self.cfg.ngram_orders):
            h = torch.zeros(history.shape[0], end - start_pos, dtype=torch.int64, device=history.device)
            for j in range(n):
                pos = t - j
                ids = history[:, pos.clamp_min(0)]
                ids = torch.where(pos >= 0, ids, torch.full_like(ids, pad))
                h = torch.bitwise_xor(h, (ids + 1) * self.hash_mult[o, j])
            out.append(h % self.buckets[o] + self.offsets[o])
        return torch.stack(out, dim=-1)

    def forward(self, x: torch.Tensor, history: torch.Tensor, start_pos: int) -> torch.Tensor:
        """x [b, s, hc, dim] bf16 streams; history [b, >= start_pos+s] ids. Returns new streams."""
        from lowbit.ops.gathered import gathered_rows

        b, s = x.shape[:2]
        rows = self.bucket_ids(history, start_pos, start_pos + s)
        mem = gathered_rows(self.table, rows, torch.bfloat16).flatten(2)  # [b, s, n_orders * ngram_dim]
        key = self.key_norm(self.key(mem)).float()
        value = self.value(mem).float()
        gate = torch.sigmoid((self.x_norm(x).float() * key.unsqueeze(2)).sum(-1) * self.cfg.dim**-0.5)
        return (x.float() + gate.unsqueeze(-1) * value.unsqueeze(2)).to(x.dtype)
