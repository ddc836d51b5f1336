"""Tensor-parallel shards from the tiny model's HF-style checkpoint, as DeepSeek's converter does.

``convert_hf_to_shards(src, dst, mp)`` writes ``model{i}-mp{mp}.safetensors`` for ranks
``i = 0 .. mp-1`` (model names, see :mod:`lowbit.models.tiny.checkpoint`) and ``config.json``:

* column-parallel tensors are split on dim 0: the vocabulary (``embed``, ``head``), the query
  heads (``attn.wq``, ``attn.attn_sink``), the shared expert's ``w1`` / ``w3``;
* row-parallel tensors on dim 1: ``attn.wo``, the shared expert's ``w2``;
* routed experts are assigned whole: rank i holds experts ``[i*E/mp, (i+1)*E/mp)``;
* everything else is replicated (norms, the router, the single KV head, the indexer,
  hyper-connection parameters, the n-gram memory).

An FP8 weight's 128x128 block scale is split with it, so each rank's slice must be whole blocks
(``N/mp`` or ``K/mp`` a multiple of 128). ``experts_dtype`` re-quantizes the routed experts:
``"fp4"`` (packed E2M1 + UE8M0 per 32, ``lowbit.formats.MXFP4``) or ``"fp8"`` (e4m3 + fp32
128x128 block scales); ``None`` keeps them as stored.

``load_shards(dir, mp)`` is the inverse: it concatenates the split tensors, gathers the experts,
checks the replicated tensors agree, and returns one state dict (``load_model`` builds the model).
"""
from __future__ import annotations

import json
import os
import re

import torch

from lowbit._validate import require
from lowbit.models.tiny.checkpoint import expert_index, is_expert, read_config, read_hf

_COLUMN = re.compile(r"^(embed\.weight|head\.(weight|scale)|layers\.\d+\.attn\.(wq\.(weight|scale)|attn_sink)"
                     r"|layers\.\d+\.ffn\.shared_experts\.w[13]\.(weight|scale))$")
_ROW = re.compile(r"^layers\.\d+\.(attn\.wo|ffn\.shared_experts\.w2)\.(weight|scale)$")
EXPERT_DTYPES = (None, "fp4", "fp8")
FP8_BLOCK = 128


def split_dim(name: str) -> int | str | None:
    """How a tensor (model name) is sharded: 0 / 1 (split dim), ``"expert"``, or None (replicated)."""
    if is_expert(name):
        return "expert"
    if _COLUMN.match(name):
        return 0
    if _ROW.match(name):
        return 1
    return None


def shard_file(i: int, mp: int) -> str:
    return f"model{i}-mp{mp}.safetensors"


def _check_split(name: str, tensors: dict, dim: int, mp: int) -> None:
    t = tensors[name]
    if name.endswith(".scale") and t.dtype == torch.float32:  # FP8 128x128 block scale
        w = tensors[name[: -len("scale")] + "weight"]
        require(w.shape[dim] % mp == 0 and (w.shape[dim] // mp) % FP8_BLOCK == 0,
                f"{name}: the FP8 weight {tuple(w.shape)} split {mp} ways on dim {dim} gives {w.shape[dim] / mp:g}, "
                f"not a multiple of the {FP8_BLOCK}-wide scale blocks")
    require(t.shape[dim] % mp == 0, f"{name} has shape {tuple(t.shape)}: dim {dim} is not divisible by mp={mp}")


def _requantize_experts(tensors: dict, fmt: str) -> dict:
    """Routed experts as ``fmt`` ("fp4" / "fp8"), from bf16, FP8 or FP4 storage (dequantized first)."""
    from torch import nn

    from lowbit.nn import Linear

    out = {k: v for k, v in tensors.items() if not is_expert(k)}
    for name in sorted(k for k in tensors if is_expert(k) and k.endswith(".weight")):
        prefix = name[: -len("weight")]
        w, s = tensors[name], tensors.get(prefix + "scale")
        if w.dtype in (torch.float8_e4m3fn, torch.uint8):
            require(s is not None, f"{name} is {w.dtype} but {prefix}scale is missing")
            fmt_in = "fp8" if w.dtype == torch.float8_e4m3fn else "fp4"
            k = w.shape[1] * (2 if fmt_in == "fp4" else 1)
            q = Linear(k, w.shape[0], dtype=w.dtype)
            q.load_state_dict({"weight": w, "scale": s})
            w = q.dequantized_weight(torch.float32)
        dense = nn.Linear(w.shape[1], w.shape[0], bias=False, device="meta")
        dense.weight = nn.Parameter(w.to(torch.bfloat16), requires_grad=False)
        q = Linear.from_float(dense, fmt)
        out[name], out[prefix + "scale"] = q.weight.detach(), q.scale.detach()
    return out


def convert_hf_to_shards(src: str, dst: str, mp: int, experts_dtype: str | None = None) -> list[str]:
    """Shard the HF-style checkpoint directory ``src`` into ``mp`` files under ``dst``.

    Returns the written shard paths. Raises ``ValueError`` (before writing anything) when a split
    tensor does not divide by ``mp`` or the experts do not spread evenly.
    """
    from safetensors.torch import save_file

    require(isinstance(mp, int) and mp >= 1, f"mp must be a positive int, got {mp!r}")
    require(experts_dtype in EXPERT_DTYPES, f"experts_dtype must be one of {EXPERT_DTYPES}, got {experts_dtype!r}")
    cfg, tensors = read_hf(src)
    require(cfg.n_experts % mp == 0, f"n_experts={cfg.n_experts} is not divisible by mp={mp}")
    if experts_dtype is not None:
        tensors = _requantize_experts(tensors, experts_dtype)
    for name in tensors:
        dim = split_dim(name)
        if isinstance(dim, int):
            _check_split(name, tensors, dim, mp)
    per_rank = cfg.n_experts // mp
    shards: list[dict[str, torch.Tensor]] = [{} for _ in range(mp)]
    for name, t in tensors.items():
        dim = split_dim(name)
        if dim == "expert":
            shards[expert_index(name) // per_rank][name] = t.contiguous()
        elif dim is None:
            for shard in shards:
                shard[name] = t.contiguous()
        else:
            for i, part in enumerate(t.chunk(mp, dim=dim)):
                shards[i][name] = part.contiguous()
    os.makedirs(dst, exist_ok=True)
    expert_fmt = experts_dtype or _stored_expert_fmt(tensors, cfg.expert_fmt)
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump({"model_type": "lowbit_tiny", "mp": mp, **{**cfg.to_dict(), "expert_fmt": expert_fmt}}, f, indent=2)
    paths = []
    for i, shard in enumerate(shards):
        paths.append(os.path.join(dst, shard_file(i, mp)))
        save_file(shard, paths[-1])
    return paths


def _stored_expert_fmt(tensors: dict, default: str) -> str:
    w = next((v for k, v in tensors.items() if is_expert(k) and k.endswith(".weight")), None)
    if w is None:
        return default
    return {torch.float8_e4m3fn: "fp8", torch.uint8: "fp4"}.get(w.dtype, "bf16")


def _bytes(t: torch.Tensor) -> torch.Tensor:
    """The raw bytes (so NaN payloads and e4m3 compare exactly)."""
    return t.contiguous().view(-1).view(torch.uint8)


def load_shards(path: str, mp: int) -> dict[str, torch.Tensor]:
    """Merge ``model{i}-mp{mp}.safetensors`` (i < mp) under ``path`` back into one state dict."""
    from safetensors.torch import load_file

    require(isinstance(mp, int) and mp >= 1, f"mp must be a positive int, got {mp!r}")
    files = [os.path.join(path, shard_file(i, mp)) for i in range(mp)]
    missing = [f for f in files if not os.path.exists(f)]
    require(not missing, f"missing shard files: {missing}")
    shards = [load_file(f) for f in files]
    merged: dict[str, torch.Tensor] = {}
    for name in sorted(set().union(*shards)):
        dim = split_dim(name)
        holders = [s[name] for s in shards if name in s]
        if dim == "expert":
            require(len(holders) == 1, f"expert tensor {name} is in {len(holders)} shards, expected exactly 1")
            merged[name] = holders[0]
            continue
        require(len(holders) == mp, f"{name} is in {len(holders)} of {mp} shards")
        if dim is None:
            require(all(torch.equal(_bytes(h), _bytes(holders[0])) for h in holders[1:]),
                    f"replicated tensor {name} differs between shards")
            merged[name] = holders[0]
        else:
            merged[name] = torch.cat(holders, dim=dim)
    return merged


def load_model(path: str, mp: int, device="cpu"):
    """A :class:`TinyModel` (mp = 1) from the shards under ``path`` and their ``config.json``."""
    from lowbit.models.tiny.model import TinyModel

    model = TinyModel(read_config(path))
    model.load_state_dict(load_shards(path, mp), strict=True)
    return model.to(device)
