"""A tiny DeepSeek-style reference model that drives every lowbit kernel (see docs/tiny_model.md).

* :class:`TinyConfig`, :class:`TinyModel`: the model (random seeded weights, its own caches).
* :func:`selftest`: prefill + decode with a KV cache, checked against a from-scratch prefill and
  (on CUDA) against the reference path; ``python -m lowbit.models.tiny`` runs it.
* :func:`save_hf`, :func:`convert_hf_to_shards`, :func:`load_shards`: a Hugging Face-style
  checkpoint and its tensor-parallel shards (``model{i}-mp{mp}.safetensors``).
"""
from __future__ import annotations

import importlib

_LAZY = {
    "TinyConfig": "lowbit.models.tiny.config",
    "TinyModel": "lowbit.models.tiny.model",
    "selftest": "lowbit.models.tiny.verify",
    "generate": "lowbit.models.tiny.verify",
    "save_hf": "lowbit.models.tiny.checkpoint",
    "load_hf": "lowbit.models.tiny.checkpoint",
    "convert_hf_to_shards": "lowbit.models.tiny.convert",
    "load_shards": "lowbit.models.tiny.convert",
    "load_model": "lowbit.models.tiny.convert",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'lowbit.models.tiny' has no attribute {name!r}")


def __dir__():
    return __all__
