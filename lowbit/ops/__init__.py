"""Ops: one folder each (``reference.py`` the PyTorch definition, the kernels in ``triton.py`` or, for
an op with several, in files named for what they compute with the route in ``dispatch.py``, and
``__init__.py`` the validated, dispatched, ``torch.library``-registered public function; a
``tune.py`` beside a launch table, run as ``lowbit tune <op>``).

The public functions are imported eagerly: several share their name with their folder
(``lowbit.ops.act_quant`` the function vs ``lowbit/ops/act_quant/``), and binding the function
here, after its package was imported, is what makes ``lowbit.ops.act_quant(...)`` the function
(also under ``torch.compile``). No op package imports Triton at module level.
"""
from lowbit.ops.act_quant import act_quant, fp4_act_quant, weight_dequant
from lowbit.ops.fp4_gemm import fp4_gemm
from lowbit.ops.fp8_gemm import fp8_gemm
from lowbit.ops.gathered import gathered_bias, gathered_dot, gathered_rows
from lowbit.ops.hc_sinkhorn import hc_split_sinkhorn
from lowbit.ops.sparse_attn import sparse_attn

__all__ = [
    "act_quant", "fp4_act_quant", "fp4_gemm", "fp8_gemm", "gathered_bias", "gathered_dot",
    "gathered_rows", "hc_split_sinkhorn", "sparse_attn", "weight_dequant",
]
