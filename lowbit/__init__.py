"""lowbit: low-bit GPU kernels for LLM inference.

Formats (``lowbit.formats``) define the bits; ops (``lowbit.ops``) compute on them with a pure
PyTorch reference and Triton kernels; modules (``lowbit.nn``) build heads and layers on the ops.

Every submodule is imported lazily, on first access: ``import lowbit`` imports neither torch nor
Triton (the ``lowbit`` command installs its signal handlers before torch loads, so a Ctrl-C
during that import stops it with one line). ``lowbit.backend`` / ``get_backend`` /
``set_backend`` import torch with :mod:`lowbit._backend` on first use, as ``lowbit.ops`` does.
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"

# public name -> module that defines it (imported on first access)
_LAZY = {
    "backend": "lowbit._backend",
    "get_backend": "lowbit._backend",
    "set_backend": "lowbit._backend",
    "DraftHead": "lowbit.nn.draft_head",
    "MarkovHead": "lowbit.nn.markov",
    "Linear": "lowbit.nn.linear",
}

__all__ = ["__version__", "formats", "ops", "nn", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        value = globals()[name] = getattr(importlib.import_module(_LAZY[name]), name)  # later lookups skip this
        return value
    if name in ("formats", "ops", "nn", "io", "models", "bench", "distributed"):
        return importlib.import_module(f"lowbit.{name}")
    raise AttributeError(f"module 'lowbit' has no attribute {name!r}")
