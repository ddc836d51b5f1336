"""Ops: one folder each (``reference.py`` the PyTorch definition, ``triton.py`` the kernels,
``__init__.py`` the validated, dispatched, ``torch.library``-registered public function).

Imported lazily so ``import lowbit.ops`` does not import Triton or every op.
"""
from __future__ import annotations

import importlib

_LAZY = {
    "gathered_dot": "lowbit.ops.gathered",
    "gathered_bias": "lowbit.ops.gathered",
    "gathered_rows": "lowbit.ops.gathered",
    "act_quant": "lowbit.ops.act_quant",
    "fp4_act_quant": "lowbit.ops.act_quant",
    "weight_dequant": "lowbit.ops.act_quant",
    "fp8_gemm": "lowbit.ops.fp8_gemm",
    "fp4_gemm": "lowbit.ops.fp4_gemm",
    "sparse_attn": "lowbit.ops.sparse_attn",
    "hc_split_sinkhorn": "lowbit.ops.hc_sinkhorn",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        fn = getattr(importlib.import_module(_LAZY[name]), name)
        # Importing the op's package set ``lowbit.ops.<name>`` to that *module*; bind the
        # function over it so ``lowbit.ops.sparse_attn(...)`` is the function from now on.
        globals()[name] = fn
        return fn
    raise AttributeError(f"module 'lowbit.ops' has no attribute {name!r}")


def __dir__():
    return __all__
