"""Configuration of the tiny DeepSeek-style reference model.

Every width that reaches an FP8 GEMM (``act_quant`` 1x128 activation groups) is a multiple of 128,
and every width that reaches an FP4 GEMM or an MXFP4 table a multiple of 32.
"""
from __future__ import annotations

import dataclasses

from lowbit._validate import require

FORMATS = ("fp8", "fp4", "bf16")


@dataclasses.dataclass(frozen=True)
class TinyConfig:
    """Shapes and formats of :class:`lowbit.models.tiny.TinyModel`. The defaults build a ~3 M
    parameter model that runs a 64-token self-test on a laptop CPU in seconds."""

    vocab_size: int = 1024
    dim: int = 256
    n_layers: int = 2
    max_batch_size: int = 4
    max_seq_len: int = 128
    norm_eps: float = 1e-6

    # hyper-connections (mHC): hc_mult residual streams mixed by Sinkhorn-normalised matrices
    hc_mult: int = 4
    hc_sinkhorn_iters: int = 20
    hc_eps: float = 1e-6

    # attention: MQA over one FP8 KV row per position; RoPE on the last rope_dim dims of q / kv
    n_heads: int = 4
    head_dim: int = 128
    rope_dim: int = 64
    rope_theta: float = 10000.0
    kv_block: int = 64  # act_quant group of the FP8 KV cache (the non-RoPE part)
    window: int = 16  # every query sees its last `window` positions ...
    index_topk: int = 16  # ... plus the `index_topk` older positions the indexer ranks highest
    index_heads: int = 4
    index_head_dim: int = 64

    # MoE: routed FP4 experts (top-k of n_experts by a sigmoid router) plus an FP8 shared expert
    n_experts: int = 4
    n_activated_experts: int = 2
    moe_inter_dim: int = 256
    n_shared_experts: int = 2  # shared expert width = n_shared_experts * moe_inter_dim
    route_scale: float = 1.0

    # n-gram memory: hash the last n ids (n in ngram_orders) into prime-sized buckets of an MXFP4 table
    ngram_orders: tuple = (2, 3)
    ngram_buckets: tuple = (2039, 2029)  # primes, one per order
    ngram_dim: int = 64
    ngram_layers: tuple = (0,)  # blocks that read the memory

    # formats of the linears (lowbit.nn.Linear.from_float): dense, routed experts, LM head
    dense_fmt: str = "fp8"
    expert_fmt: str = "fp4"
    head_fmt: str = "bf16"

    def __post_init__(self):
        for name in ("dense_fmt", "expert_fmt", "head_fmt"):
            require(getattr(self, name) in FORMATS, f"{name} must be one of {FORMATS}, got {getattr(self, name)!r}")
        require(self.dim % 128 == 0, f"dim must be a multiple of 128 (FP8 activation groups), got {self.dim}")
        require(self.moe_inter_dim % 128 == 0, f"moe_inter_dim must be a multiple of 128, got {self.moe_inter_dim}")
        require((self.n_heads * self.head_dim) % 128 == 0,
                f"n_heads * head_dim must be a multiple of 128, got {self.n_heads} * {self.head_dim}")
        require(0 < self.rope_dim < self.head_dim and self.rope_dim % 2 == 0,
                f"rope_dim must be even and in (0, head_dim={self.head_dim}), got {self.rope_dim}")
        require((self.head_dim - self.rope_dim) % self.kv_block == 0 and self.kv_block in (64, 128),
                f"head_dim - rope_dim = {self.head_dim - self.rope_dim} must be a multiple of kv_block (64 or 128), got {self.kv_block}")
        require(self.index_head_dim in (64, 128) and self.index_head_dim >= self.rope_dim,
                f"index_head_dim must be 64 or 128 (one act_quant group per head) and >= rope_dim={self.rope_dim}, got {self.index_head_dim}")
        require(1 <= self.n_activated_experts <= self.n_experts,
                f"n_activated_experts must be in [1, n_experts={self.n_experts}], got {self.n_activated_experts}")
        require(len(self.ngram_orders) == len(self.ngram_buckets) and all(n >= 1 for n in self.ngram_orders),
                f"ngram_orders {self.ngram_orders} and ngram_buckets {self.ngram_buckets} must pair up (orders >= 1)")
        require((len(self.ngram_orders) * self.ngram_dim) % 128 == 0 and self.ngram_dim % 32 == 0,
                f"len(ngram_orders) * ngram_dim must be a multiple of 128 and ngram_dim of 32, got {len(self.ngram_orders)} * {self.ngram_dim}")
        require(all(0 <= i < self.n_layers for i in self.ngram_layers),
                f"ngram_layers {self.ngram_layers} must index blocks in [0, {self.n_layers})")
        require(self.window >= 1 and self.index_topk >= 0, f"window must be >= 1 and index_topk >= 0, got {self.window}, {self.index_topk}")

    @property
    def hc_mix_dim(self) -> int:
        """Width of the mixes vector hc_split_sinkhorn splits: pre (hc) + post (hc) + comb (hc*hc)."""
        return (2 + self.hc_mult) * self.hc_mult

    def to_dict(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_dict(cls, d: dict) -> "TinyConfig":
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - fields)
        require(not unknown, f"unknown TinyConfig fields {unknown}")
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})
