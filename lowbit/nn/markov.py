"""The DSpark-style Markov head: a rank-r bigram correction of a draft model's logits.

``markov_w1`` ``[V, r]`` embeds the previous token; ``markov_w2`` ``[V, r]`` maps that embedding
back to the vocabulary. The correction is ``logits += scale * W2 @ W1[prev_token]``. A drafter
that keeps only its top-k candidates applies it to those k logits alone
(:meth:`MarkovHead.apply_bias_gathered`, the fused :func:`lowbit.ops.gathered_bias`), so only
k rows of W2 are read per step.

Weights: W1 dense (bf16/fp16/fp32) or a low-bit table (NVFP4 / MXFP4 / FP8 row / INTx: looked up
with :func:`lowbit.ops.gathered_rows`); W2 dense or NVFP4 (any format the gathered ops accept
works). ModelOpt NVFP4 checkpoints store W2 as ``<prefix>.markov_w2.weight`` (uint8 packed
``[V, r/2]``), ``.weight_scale`` (e4m3 ``[V, r/16]``), ``.weight_scale_2`` (fp32 scalar, the
global multiplier) and optionally ``.input_scale``; W1 as ``<prefix>.markov_w1.weight``. They are
kept exactly as stored (no repacking).
"""
from __future__ import annotations

import torch
from torch import nn

from lowbit.formats.fp8 import FP8
from lowbit.formats.intx import INTx
from lowbit.formats.mxfp4 import MXFP4
from lowbit.formats.nvfp4 import NVFP4
from lowbit.ops.gathered import gathered_bias, gathered_dot, gathered_rows

_FLOAT = (torch.bfloat16, torch.float16, torch.float32)


def _fail(msg: str):
    raise ValueError(msg)


class MarkovHead(nn.Module):
    """Markov bias head. ``markov_w1``/``markov_w2``: ``[V, r]`` dense tensors or lowbit formats.

    Tensors are held as buffers, so ``.to(device)`` and ``state_dict`` carry them; the format
    objects are rebuilt from the buffers on access (cheap: no copies).
    """

    def __init__(self, markov_w1, markov_w2, input_scale: torch.Tensor | None = None):
        super().__init__()
        self._w1_kind, self._w1_meta = self._register("markov_w1", markov_w1)
        self._w2_kind, self._w2_meta = self._register("markov_w2", markov_w2)
        v1, r1 = self.markov_w1.shape
        v2, r2 = self.markov_w2.shape
        if (v1, r1) != (v2, r2):
            _fail(f"markov_w1 has shape {(v1, r1)} but markov_w2 has shape {(v2, r2)}; both must be [V, r]")
        if input_scale is not None:
            self.register_buffer("input_scale", input_scale.reshape(()).float())
        else:
            self.register_buffer("input_scale", None)
        self.vocab_size, self.rank = v1, r1

    # -- weights held as buffers ---------------------------------------------------------------

    def _register(self, name, weight):
        if isinstance(weight, torch.Tensor):
            if weight.dim() != 2 or weight.dtype not in _FLOAT:
                _fail(f"{name} must be a 2-D bf16/fp16/fp32 tensor or a lowbit format, got shape "
                      f"{tuple(weight.shape)} dtype {weight.dtype}")
            self.register_buffer(f"{name}_weight", weight)
            return "dense", {}
        kinds = {NVFP4: "nvfp4", MXFP4: "mxfp4", FP8: "fp8", INTx: "intx"}
        kind = kinds.get(type(weight))
        if kind is None:
            _fail(f"{name} must be a tensor, NVFP4, MXFP4, FP8 or INTx, got {type(weight).__name__}")
        meta = {}
        for f in weight.__dataclass_fields__:
            value = getattr(weight, f)
            if isinstance(value, torch.Tensor):
                self.register_buffer(f"{name}_{f}", value)
            else:
                meta[f] = value
        return kind, meta

    def _weight(self, name, kind, meta):
        if kind == "dense":
            return getattr(self, f"{name}_weight")
        cls = {"nvfp4": NVFP4, "mxfp4": MXFP4, "fp8": FP8, "intx": INTx}[kind]
        fields = {f: getattr(self, f"{name}_{f}") for f in cls.__dataclass_fields__ if f not in meta}
        return cls(**fields, **meta)

    @property
    def markov_w1(self):
        return self._weight("markov_w1", self._w1_kind, self._w1_meta)

    @property
    def markov_w2(self):
        return self._weight("markov_w2", self._w2_kind, self._w2_meta)

    # -- compute -------------------------------------------------------------------------------

    def embed(self, prev_tokens: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
        """``W1[prev_tokens]``: ``[*prev_tokens.shape, r]``. Dense W1 keeps its dtype (or ``dtype``);
        a low-bit W1 is decoded by :func:`gathered_rows` into ``dtype`` (default bf16).

        ``prev_tokens`` must be int32 / int64 ids in ``[0, vocab_size)``; anything else is a
        ``ValueError`` naming it (checked before any launch: one host synchronization)."""
        w1 = self.markov_w1
        if not isinstance(prev_tokens, torch.Tensor):
            _fail(f"prev_tokens must be a torch.Tensor, got {type(prev_tokens).__name__}")
        if prev_tokens.dtype not in (torch.int32, torch.int64):
            _fail(f"prev_tokens has dtype {prev_tokens.dtype}; expected int32/int64")
        if prev_tokens.numel():
            lo, hi = (int(v) for v in torch.stack([prev_tokens.min().long(), prev_tokens.max().long()]).tolist())
            if lo < 0 or hi >= self.vocab_size:
                bad = lo if lo < 0 else hi
                _fail(f"prev_tokens holds token id {bad}, outside [0, vocab_size={self.vocab_size})")
        if isinstance(w1, torch.Tensor):
            out = nn.functional.embedding(prev_tokens.long(), w1)
            return out if dtype is None else out.to(dtype)
        return gathered_rows(w1, prev_tokens, dtype or torch.bfloat16)

    def _check(self, embed, logits):
        if not isinstance(embed, torch.Tensor) or embed.dim() != 2 or embed.shape[1] != self.rank:
            _fail(f"embed must be [B, r={self.rank}], got {tuple(getattr(embed, 'shape', ()))}")
        if not isinstance(logits, torch.Tensor) or logits.dim() != 2 or logits.shape != (embed.shape[0], self.vocab_size):
            _fail(f"logits must be [B, V] = ({embed.shape[0]}, {self.vocab_size}), got {tuple(getattr(logits, 'shape', ()))}")

    def apply_bias(self, embed: torch.Tensor, logits: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        """``logits += scale * embed @ W2^T`` over the whole vocabulary, in place; returns logits.

        embed ``[B, r]``; logits ``[B, V]``. Dense W2: one ``addmm_`` (fp32 math for fp32 logits).
        Low-bit W2: :func:`gathered_dot` over every row (decoded in the kernel, the table is never
        materialized), then one fp32 add and one rounding to ``logits.dtype``.
        """
        self._check(embed, logits)
        w2 = self.markov_w2
        if isinstance(w2, torch.Tensor):
            proj = (embed.to(w2.dtype) @ w2.t()).float()  # no fp32 copy of the table
        else:
            b = embed.shape[0]
            rows = torch.arange(self.vocab_size, device=embed.device).expand(b, -1)
            proj = gathered_dot(embed, w2, rows)
        logits.copy_(logits.float() + scale * proj)
        return logits

    def apply_bias_gathered(self, embed: torch.Tensor, logits: torch.Tensor, values: torch.Tensor,
                            index: torch.Tensor, scale: float = 1.0, fused: bool = True) -> torch.Tensor:
        """``logits[b, index[b,t]] = values[b,t] + scale * dot(embed[b], W2[index[b,t]])``.

        The top-k form: values ``[B, T]`` are the candidates' logits before the correction,
        index ``[B, T]`` their token ids; only those T entries of each logits row are written.
        ``fused=True`` (default) runs :func:`gathered_bias` (one launch on GPU); ``fused=False``
        runs the unfused PyTorch path (index_select -> dequantize -> bmm -> scatter), kept for
        comparison and for weights the fused op does not accept.
        """
        self._check(embed, logits)
        w2 = self.markov_w2
        if fused:
            return gathered_bias(embed, w2, values, index, logits, float(scale))
        dense = w2 if isinstance(w2, torch.Tensor) else None
        rows = index.reshape(-1).long()
        if dense is None:
            cls = type(w2)
            sub = {f: (getattr(w2, f)[rows] if isinstance(getattr(w2, f), torch.Tensor) and getattr(w2, f).dim() == 2
                       else getattr(w2, f)) for f in w2.__dataclass_fields__}
            w = cls(**sub).dequantize(torch.float32)
        else:
            w = dense[rows].float()
        dot = torch.bmm(w.view(*index.shape, -1), embed.float().unsqueeze(-1)).squeeze(-1)
        logits.scatter_(1, index.long(), (values.float() + scale * dot).to(logits.dtype))
        return logits

    def forward(self, prev_tokens: torch.Tensor, logits: torch.Tensor, scale: float = 1.0,
                values: torch.Tensor | None = None, index: torch.Tensor | None = None) -> torch.Tensor:
        """Embed ``prev_tokens`` ``[B]`` and apply the bias (to all rows, or to ``index`` if given)."""
        e = self.embed(prev_tokens)
        if index is None:
            return self.apply_bias(e, logits, scale)
        return self.apply_bias_gathered(e, logits, values, index, scale)

    # -- checkpoints ---------------------------------------------------------------------------

    @classmethod
    def from_safetensors(cls, path, prefix: str = "markov", device="cpu") -> "MarkovHead":
        """Load ``<prefix>.markov_w1.weight`` and ``<prefix>.markov_w2.*`` from a safetensors file.

        A uint8 ``weight`` with a ``weight_scale`` is NVFP4 (ModelOpt names; ``weight_scale``
        may be stored as e4m3 or as its uint8 bits, ``weight_scale_2`` as a scalar or ``[1]``);
        anything else is a dense weight. Tensors are used as stored.
        """
        from safetensors.torch import load_file

        t = load_file(str(path), device=str(device))

        def load(name):
            key = f"{prefix}.{name}.weight"
            if key not in t:
                _fail(f"{path} has no tensor {key!r} (found: {sorted(k for k in t if k.startswith(prefix))})")
            w = t[key]
            if w.dtype == torch.uint8 and f"{prefix}.{name}.weight_scale" in t:
                s = t[f"{prefix}.{name}.weight_scale"]
                if s.dtype == torch.uint8:
                    s = s.view(torch.float8_e4m3fn)
                g = t.get(f"{prefix}.{name}.weight_scale_2")
                if g is None:
                    _fail(f"{path}: {key} is NVFP4 but {prefix}.{name}.weight_scale_2 is missing")
                return NVFP4(w, s, g.float().reshape(()), 16), t.get(f"{prefix}.{name}.input_scale")
            return w, None

        w1, _ = load("markov_w1")
        w2, input_scale = load("markov_w2")
        return cls(w1, w2, input_scale=input_scale)

    def to_safetensors(self, path, prefix: str = "markov") -> None:
        """Write the head under the names :meth:`from_safetensors` reads (NVFP4 by ModelOpt names)."""
        from safetensors.torch import save_file

        out = {}
        for name in ("markov_w1", "markov_w2"):
            w = getattr(self, name)
            if isinstance(w, torch.Tensor):
                out[f"{prefix}.{name}.weight"] = w
            elif isinstance(w, NVFP4):
                out[f"{prefix}.{name}.weight"] = w.packed
                out[f"{prefix}.{name}.weight_scale"] = w.scale
                out[f"{prefix}.{name}.weight_scale_2"] = w.global_scale
            else:
                _fail(f"to_safetensors writes dense or NVFP4 weights; {name} is {type(w).__name__}")
        if self.input_scale is not None:
            out[f"{prefix}.markov_w2.input_scale"] = self.input_scale
        save_file({k: v.detach().contiguous().cpu() for k, v in out.items()}, str(path))
