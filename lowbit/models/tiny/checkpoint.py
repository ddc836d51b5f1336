"""The tiny model's Hugging Face-style checkpoint: ``config.json`` + ``model.safetensors``.

Names follow the DeepSeek-V3 checkpoints on the Hub (``model.layers.0.self_attn.q_proj.weight``,
``mlp.experts.3.down_proj.weight``, ``lm_head.weight``); the model's own names are DeepSeek's
inference names (``layers.0.attn.wq.weight``, ``ffn.experts.3.w2.weight``, ``head.weight``).
The mapping is one rename per dotted component (:data:`HF_NAMES`), plus the ``model.`` prefix.

Quantized linears: an FP8 weight (e4m3 ``[N, K]``) keeps its fp32 128x128 block scale as
``weight_scale_inv`` (DeepSeek's name for the multiplier); a packed FP4 weight (uint8 ``[N, K/2]``)
keeps its UE8M0 exponent bytes ``[N, K/32]`` as ``weight_scale``. Routed experts can be saved
dequantized to bf16 (exact: every E2M1 value times a power of two is a bf16 number), which is
what the converter then re-quantizes.
"""
from __future__ import annotations

import json
import os

import torch

from lowbit._validate import require
from lowbit.models.tiny.config import TinyConfig

#: model component -> HF component (applied to every dotted component of a name)
HF_NAMES = {
    "embed": "embed_tokens",
    "head": "lm_head",
    "attn": "self_attn",
    "wq": "q_proj",
    "wk": "k_proj",
    "wkv": "kv_proj",
    "wo": "o_proj",
    "attn_sink": "sinks",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "ffn": "mlp",
    "w1": "gate_proj",
    "w2": "down_proj",
    "w3": "up_proj",
    "bias": "e_score_correction_bias",
    "ngram": "ngram_memory",
}
_FROM_HF = {v: k for k, v in HF_NAMES.items()}
_SCALE_NAMES = ("weight_scale_inv", "weight_scale")
EXPERT_DTYPES = ("bf16", "fp4")


def is_linear_scale(name: str, tensors) -> bool:
    """A quantized linear's scale: ``<module>.scale`` next to a non-float ``<module>.weight``."""
    if not name.endswith(".scale"):
        return False
    w = tensors.get(name[: -len("scale")] + "weight")
    return w is not None and w.dtype in (torch.float8_e4m3fn, torch.uint8)


def to_hf_name(name: str, tensors) -> str:
    parts = name.split(".")
    if is_linear_scale(name, tensors):
        w = tensors[name[: -len("scale")] + "weight"]
        parts[-1] = "weight_scale_inv" if w.dtype == torch.float8_e4m3fn else "weight_scale"
    parts = [HF_NAMES.get(p, p) for p in parts]
    return ".".join(parts) if parts[0] == "lm_head" else "model." + ".".join(parts)


def from_hf_name(name: str) -> str:
    parts = name.split(".")
    if parts[0] == "model":
        parts = parts[1:]
    if parts[-1] in _SCALE_NAMES:
        parts[-1] = "scale"
    return ".".join(_FROM_HF.get(p, p) for p in parts)


def is_expert(name: str) -> bool:
    """``layers.<i>.ffn.experts.<e>.*`` (model names)."""
    return ".ffn.experts." in name


def expert_index(name: str) -> int:
    return int(name.split(".ffn.experts.")[1].split(".")[0])


def save_hf(model, path: str, experts_dtype: str = "bf16") -> str:
    """Write ``model`` (a :class:`TinyModel`) to the directory ``path`` in HF style; returns the
    safetensors file. ``experts_dtype``: ``"bf16"`` (dequantized routed experts) or ``"fp4"``
    (packed as the model holds them, when its experts are FP4)."""
    from safetensors.torch import save_file

    require(experts_dtype in EXPERT_DTYPES, f"experts_dtype must be one of {EXPERT_DTYPES}, got {experts_dtype!r}")
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    cfg = model.cfg
    if experts_dtype == "bf16":
        for mod_name, mod in model.named_modules():
            if is_expert(mod_name + ".") and hasattr(mod, "dequantized_weight") and mod.scale is not None:
                state[mod_name + ".weight"] = mod.dequantized_weight(torch.bfloat16).cpu()
                del state[mod_name + ".scale"]
        cfg = TinyConfig.from_dict({**cfg.to_dict(), "expert_fmt": "bf16"})
    else:
        require(cfg.expert_fmt == "fp4", f"experts_dtype='fp4' needs a model with FP4 experts, got expert_fmt={cfg.expert_fmt!r}")
    hf = {to_hf_name(k, state): v for k, v in state.items()}
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump({"model_type": "lowbit_tiny", **cfg.to_dict()}, f, indent=2)
    file = os.path.join(path, "model.safetensors")
    save_file(hf, file)
    return file


def read_config(path: str) -> TinyConfig:
    """The :class:`TinyConfig` in ``path/config.json`` (HF keys ``model_type`` / ``mp`` ignored)."""
    file = os.path.join(path, "config.json")
    require(os.path.isfile(file), f"no config.json in {path!r}: not a tiny-model checkpoint directory")
    with open(file) as f:
        d = json.load(f)
    d = {k: v for k, v in d.items() if k not in ("model_type", "mp")}
    return TinyConfig.from_dict(d)


def read_hf(path: str) -> tuple[TinyConfig, dict[str, torch.Tensor]]:
    """(config, tensors under the model's names) from an HF-style directory (all its
    ``*.safetensors``), or from one ``.safetensors`` file with ``config.json`` beside it."""
    from safetensors.torch import load_file

    if os.path.isfile(path):
        folder, files = os.path.dirname(os.path.abspath(path)), [os.path.basename(path)]
    else:
        require(os.path.isdir(path), f"{path!r} is neither a directory nor a file")
        folder, files = path, sorted(f for f in os.listdir(path) if f.endswith(".safetensors"))
    require(bool(files), f"no *.safetensors files in {path!r}")
    tensors: dict[str, torch.Tensor] = {}
    for f in files:
        for k, v in load_file(os.path.join(folder, f)).items():
            name = from_hf_name(k)
            require(name not in tensors, f"tensor {k!r} maps to {name!r}, which another tensor already gave")
            tensors[name] = v
    return read_config(folder), tensors


def load_hf(path: str, device="cpu"):
    """A :class:`TinyModel` from an HF-style directory written by :func:`save_hf`."""
    from lowbit.models.tiny.model import TinyModel

    cfg, tensors = read_hf(path)
    model = TinyModel(cfg)
    model.load_state_dict(tensors, strict=True)
    return model.to(device)
