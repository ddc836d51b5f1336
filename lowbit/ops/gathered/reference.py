"""Pure-PyTorch definition of the gathered projection (SPEC §3); also the CPU path.

Every function takes a weight already split into plain tensors plus a format code (what the
``torch.library`` ops receive, since a format dataclass cannot cross that boundary):

=======  ==================  ==========================  ========================  ================
code     ``data`` [V, ...]    ``scale``                   ``aux``                   ints used
=======  ==================  ==========================  ========================  ================
DENSE    bf16/fp16/fp32 [V,K] None                        None                      k
FP8_ROW  e4m3 [V, K] (u8)    fp32 [V, 1]                 None                      k
NVFP4    uint8 [V, K/2]      e4m3 [V, K/16] (u8)         fp32 0-d (global scale)   k
MXFP4    uint8 [V, K/2]      uint8 UE8M0 [V, K/32]       None                      k
INTX     uint8 [V, Kp/P]     fp16 [V, Kp/G]              uint8 zero [V, Kp/G]      k, bits, group
=======  ==================  ==========================  ========================  ================

E4M3 tensors arrive as uint8 views of their bits ("(u8)"); they are viewed back here.
Only the selected rows are decoded: the rows are gathered first (``data[rows]``) and the
format's own ``dequantize`` (the spec made executable) runs on that small slice.
"""
from __future__ import annotations

import torch

from lowbit.formats.intx import INTx
from lowbit.formats.mxfp4 import MXFP4
from lowbit.formats.nvfp4 import NVFP4

DENSE, FP8_ROW, NVFP4_CODE, MXFP4_CODE, INTX = 0, 1, 2, 3, 4
_E4M3 = torch.float8_e4m3fn
FORMAT_NAMES = {DENSE: "dense", FP8_ROW: "fp8-row", NVFP4_CODE: "nvfp4", MXFP4_CODE: "mxfp4", INTX: "intx"}


def rows_fp32(fmt: int, data, scale, aux, rows: torch.Tensor, k: int, bits: int, group_size: int) -> torch.Tensor:
    """Dequantize ``W[rows]`` to fp32 ``[len(rows), K]``; ``rows`` is a 1-D int64 tensor."""
    if fmt == DENSE:
        return data[rows].float()
    if fmt == FP8_ROW:
        return data[rows].view(_E4M3).float() * scale[rows].float()
    if fmt == NVFP4_CODE:
        return NVFP4(data[rows], scale[rows].view(_E4M3), aux, 16).dequantize(torch.float32)
    if fmt == MXFP4_CODE:
        return MXFP4(data[rows], scale[rows], "floor", 32).dequantize(torch.float32)
    if fmt == INTX:
        return INTx(data[rows], scale[rows], aux[rows], bits, group_size, k).dequantize(torch.float32)
    raise ValueError(f"unknown gathered format code {fmt}")


def gathered_rows(fmt, data, scale, aux, index, k, bits, group_size, dtype) -> torch.Tensor:
    """``W[index]`` dequantized: ``[*index.shape, K]`` in ``dtype`` (decoded in fp32, cast once)."""
    rows = index.reshape(-1).long()
    return rows_fp32(fmt, data, scale, aux, rows, k, bits, group_size).to(dtype).reshape(*index.shape, k)


def gathered_dot(x, fmt, data, scale, aux, index, k, bits, group_size) -> torch.Tensor:
    """``out[b, t] = dot(x[b], W[index[b, t]])`` in fp32: x ``[B, K]``, index ``[B, T]`` -> ``[B, T]``."""
    b, t = index.shape
    w = rows_fp32(fmt, data, scale, aux, index.reshape(-1).long(), k, bits, group_size).view(b, t, k)
    return torch.bmm(w, x.float().unsqueeze(-1)).squeeze(-1)


def gathered_bias(x, fmt, data, scale, aux, values, index, logits, alpha, k, bits, group_size) -> None:
    """``logits[b, index[b,t]] = values[b,t] + alpha * dot(x[b], W[index[b,t]])``, in place.

    The sum is formed in fp32 and cast once to ``logits.dtype``. ``values`` is only read (the
    fp32 copy is a new tensor even when ``values`` is already fp32). With duplicate indices in a
    row, one of the writes wins (``scatter_`` semantics); they agree when their values agree.
    """
    dot = gathered_dot(x, fmt, data, scale, aux, index, k, bits, group_size)
    out = values.float() + alpha * dot  # out of place: never aliases values
    logits.scatter_(1, index.long(), out.to(logits.dtype))
