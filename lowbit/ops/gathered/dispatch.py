"""Which kernel serves the gathered ops for a call, with which configuration; ``dispatch_table()``
gives the rules as rows.

| op | kernel | weight | GPU | also needs | configuration |
|---|---|---|---|---|---|
| ``gathered_dot`` / ``gathered_bias`` | ``mma_nvfp4`` | NVFP4 | sm_90 | bf16 x, K % 32 == 0, contiguous aligned rows | ``mma_nvfp4.pick_config(B, T, K)`` |
| ``gathered_dot`` / ``gathered_bias`` | ``cuda_core`` | any | any (the interpreter too) | | ``cuda_core.DOT_CONFIGS`` row of B*T (the interpreter: 8 indices a program) |
| ``gathered_rows`` | ``cuda_core`` | any | any (the interpreter too) | | ``cuda_core.ROWS_CONFIG`` |

"aligned rows": x and the packed data 16-byte aligned with row strides of whole 16-byte segments,
the scale rows 2-byte aligned (the MMA kernel reads them as int32 / int16 words). The tensor-core
kernel measured faster on every benchmark shape it serves (docs/gathered.md).
"""
from __future__ import annotations

import torch

from lowbit._backend import capability_at_least, interpret_mode
from lowbit.ops.gathered import cuda_core, mma_nvfp4
from lowbit.ops.gathered.reference import NVFP4_CODE

__all__ = ["dispatch_table", "gathered_bias", "gathered_dot", "gathered_rows", "mma_ok"]


def mma_ok(x: torch.Tensor, fmt: int, data: torch.Tensor, scale: torch.Tensor | None, k: int, sm90: bool) -> bool:
    """Whether the tensor-core kernel takes this call (``sm90``: a GPU with ``mul.rn.bf16x2``,
    sm_90+, not the Triton interpreter)."""
    if fmt != NVFP4_CODE or not sm90:
        return False
    if x.dtype != torch.bfloat16 or k % 32 or k == 0:
        return False
    if x.stride(1) != 1 or data.stride(1) != 1 or scale.stride(1) != 1:
        return False
    if x.stride(0) % 8 or data.stride(0) % 16 or scale.stride(0) % 2:
        return False
    return x.data_ptr() % 16 == 0 and data.data_ptr() % 16 == 0 and scale.data_ptr() % 2 == 0


def _sm90(dev: torch.device) -> bool:
    return not interpret_mode() and capability_at_least(dev, (9, 0))


def _dot(x, fmt, data, scale, aux, index, k, bits, group_size, out, values, alpha, bias, config) -> None:
    mma_cfg = None if config is None else config.get("MMA")
    if mma_cfg is not None or (config is None and mma_ok(x, fmt, data, scale, k, _sm90(x.device))):
        mma_nvfp4.launch(x, data, scale, aux, index, k, out, values, alpha, bias, mma_cfg)
        return
    if config is None:
        config = cuda_core.dot_config(*index.shape)
        if interpret_mode():  # the interpreter's cost is per program: fewer, taller programs
            config = dict(config, BT=8)
    cuda_core.launch_dot(x, fmt, data, scale, aux, index, k, bits, group_size, out, values, alpha, bias, config)


def gathered_dot(x, fmt, data, scale, aux, index, k, bits, group_size, config=None) -> torch.Tensor:
    """fp32 ``[B, T]`` dots (see :func:`lowbit.ops.gathered.gathered_dot`; the operands as
    ``unpack_weight`` gives them). ``config`` as in :func:`gathered_bias`."""
    out = torch.empty(index.shape, dtype=torch.float32, device=x.device)
    _dot(x, fmt, data, scale, aux, index, k, bits, group_size, out, None, 1.0, False, config)
    return out


def gathered_bias(x, fmt, data, scale, aux, values, index, logits, alpha, k, bits, group_size, config=None) -> None:
    """Scatter ``values + alpha * dot`` into ``logits`` in place. ``config`` pins a kernel and its
    launch configuration (tuning, tests): ``{"MMA": (RT, W)}`` the tensor-core kernel (NVFP4),
    any other dict a :data:`cuda_core.DOT_CONFIGS` row for the CUDA-core kernel."""
    _dot(x, fmt, data, scale, aux, index, k, bits, group_size, logits, values, alpha, True, config)


def gathered_rows(fmt, data, scale, aux, index, k, bits, group_size, dtype) -> torch.Tensor:
    """``[*index.shape, K]`` decoded rows in ``dtype``."""
    return cuda_core.launch_rows(fmt, data, scale, aux, index, k, bits, group_size, dtype)


def dispatch_table() -> list[dict]:
    """The rules as rows (op, kernel, weight, GPU, conditions, configuration), in order."""
    dot = "gathered_dot / gathered_bias"
    return [
        dict(op=dot, kernel="mma_nvfp4", weight="NVFP4", gpu="sm_90",
             when="bf16 x, K % 32 == 0, contiguous aligned rows", config="mma_nvfp4.pick_config(B, T, K)"),
        dict(op=dot, kernel="cuda_core", weight="any", gpu="any", when="", config="cuda_core.DOT_CONFIGS row of B*T"),
        dict(op="gathered_rows", kernel="cuda_core", weight="any", gpu="any", when="", config="cuda_core.ROWS_CONFIG"),
    ]
