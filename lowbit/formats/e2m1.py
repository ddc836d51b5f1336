"""E2M1 (FP4) element codec: encode / decode / pack / unpack. Pure PyTorch.

A nibble is ``s e1 e0 m``. Codes 0..7 are ``0, 0.5, 1, 1.5, 2, 3, 4, 6``; codes 8..15 are the same
values negated (0x8 is -0). There is no Inf and no NaN.

Encoding is round-to-nearest-even on the magnitude with saturation at 6: the decision points are
0.25, 0.75, 1.25, 1.75, 2.5, 3.5 and 5, and a tie goes to the even code (0.25->0, 0.75->1,
1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4). Infinities saturate to +-6.

Sign rule: the sign bit is ``x < 0``. So a small negative that rounds to zero is 0x8, while
``-0.0`` itself encodes as 0x0 (it is not < 0). NaN policy: NaN encodes to 0x0 (+0) — E2M1 has no
NaN, and a zero is the value least able to win a max/argmax downstream. (``ml_dtypes`` maps both
-0.0 and NaN to 0x8; the tests pin these two documented differences.)

Packing: element ``2i`` is the LOW nibble and element ``2i+1`` the HIGH nibble of byte ``i``
(byte 0x31 decodes to ``[0.5, 1.5]``), as ModelOpt, vLLM, torchao and OCP MX do.
"""
from __future__ import annotations

import torch

from lowbit._validate import check_tensor, require

#: fp32 value of each of the 16 codes.
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)
E2M1_MAX = 6.0

# (threshold, inclusive) pairs: the magnitude code is the number of thresholds passed. A tie
# passes the threshold exactly when the code above it is even (RNE on the code).
_THRESHOLDS = ((0.25, False), (0.75, True), (1.25, False), (1.75, True), (2.5, False), (3.5, True), (5.0, False))


def e2m1_encode(x: torch.Tensor) -> torch.Tensor:
    """Round ``x`` (any float dtype, any shape) to E2M1 codes, one code per uint8 (0..15)."""
    check_tensor("x", x)
    require(x.is_floating_point(), f"x must be a floating-point tensor, got {x.dtype}")
    # fp64 stays fp64: rounding it to fp32 first could turn a value just off a tie into a tie.
    a = (x if x.dtype == torch.float64 else x.float()).abs()
    code = torch.zeros(x.shape, dtype=torch.uint8, device=x.device)
    for threshold, inclusive in _THRESHOLDS:
        passed = (a >= threshold) if inclusive else (a > threshold)
        code += passed.to(torch.uint8)  # NaN compares False everywhere -> magnitude code 0
    sign = (x < 0).to(torch.uint8) << 3
    return code | sign


def e2m1_decode(codes: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Decode E2M1 codes (integer tensor, values 0..15; higher bits ignored) to ``dtype``."""
    check_tensor("codes", codes, dtypes=(torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64))
    table = torch.tensor(E2M1_VALUES, dtype=torch.float32, device=codes.device)
    return table[(codes.to(torch.int64) & 0xF)].to(dtype)


def pack_nibbles(codes: torch.Tensor) -> torch.Tensor:
    """Pack 4-bit codes ``[..., K]`` (K even) into bytes ``[..., K/2]``: element 2i -> low nibble."""
    check_tensor("codes", codes, dtypes=(torch.uint8,))
    require(codes.dim() >= 1 and codes.shape[-1] % 2 == 0, f"last dim must be even to pack nibbles, got shape {tuple(codes.shape)}")
    pairs = codes.reshape(*codes.shape[:-1], codes.shape[-1] // 2, 2)
    return (pairs[..., 0] & 0xF) | ((pairs[..., 1] & 0xF) << 4)


def unpack_nibbles(packed: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`pack_nibbles`: bytes ``[..., K/2]`` -> codes ``[..., K]`` (uint8)."""
    check_tensor("packed", packed, dtypes=(torch.uint8, torch.int8))
    p = packed.view(torch.uint8) if packed.dtype == torch.int8 else packed
    low = p & 0xF
    high = p >> 4
    return torch.stack((low, high), dim=-1).reshape(*p.shape[:-1], p.shape[-1] * 2)


def e2m1_pack(x: torch.Tensor) -> torch.Tensor:
    """Encode and pack in one step: float ``[..., K]`` -> uint8 ``[..., K/2]``."""
    return pack_nibbles(e2m1_encode(x))


def e2m1_unpack(packed: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Unpack and decode: uint8/int8 ``[..., K/2]`` (or float4_e2m1fn_x2) -> ``dtype [..., K]``."""
    if packed.dtype not in (torch.uint8, torch.int8):
        x2 = getattr(torch, "float4_e2m1fn_x2", None)
        require(x2 is not None and packed.dtype == x2, f"packed must be uint8/int8/float4_e2m1fn_x2, got {packed.dtype}")
        packed = packed.view(torch.uint8)
    return e2m1_decode(unpack_nibbles(packed), dtype)
