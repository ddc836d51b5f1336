"""nn.Modules built on the ops: DraftHead, MarkovHead, Linear (imported lazily)."""
from __future__ import annotations

import importlib

_LAZY = {
    "DraftHead": "lowbit.nn.draft_head",
    "MarkovHead": "lowbit.nn.markov",
    "Linear": "lowbit.nn.linear",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'lowbit.nn' has no attribute {name!r}")


def __dir__():
    return __all__
