"""lowbit: low-bit GPU kernels for LLM inference.

Formats (``lowbit.formats``) define the bits; ops (``lowbit.ops``) compute on them with a pure
PyTorch reference and Triton kernels; modules (``lowbit.nn``) build heads and layers on the ops.

Heavy submodules are imported lazily so ``import lowbit`` stays cheap and never imports Triton.
"""
from __future__ import annotations

import importlib

from lowbit._backend import backend, get_backend, set_backend

__version__ = "0.1.0"

# public name -> module that defines it (imported on first access)
_LAZY = {
    "DraftHead": "lowbit.nn.draft_head",
    "MarkovHead": "lowbit.nn.markov",
    "Linear": "lowbit.nn.linear",
}

__all__ = ["__version__", "backend", "get_backend", "set_backend", "formats", "ops", "nn", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    if name in ("formats", "ops", "nn", "io", "models", "bench", "distributed"):
        return importlib.import_module(f"lowbit.{name}")
    raise AttributeError(f"module 'lowbit' has no attribute {name!r}")
