"""UE8M0 (``float8_e8m0fnu``) scale codec: an unsigned power of two, value ``2^(e - 127)``.

0xFF is NaN; there is no zero (e = 0 decodes to 2^-127, an fp32 subnormal). All rounding here is
exponent-bit arithmetic on the fp32 bit pattern: no log2 / ceil instructions, so a kernel can
reproduce it exactly.
"""
from __future__ import annotations

import torch

from lowbit._validate import check_tensor

UE8M0_NAN = 0xFF


def _bits(x: torch.Tensor) -> torch.Tensor:
    return x.float().contiguous().view(torch.int32)


def ue8m0_decode(e: torch.Tensor) -> torch.Tensor:
    """UE8M0 bytes (uint8 or float8_e8m0fnu) -> fp32 ``2^(e-127)``; 0xFF -> NaN; 0 -> 2^-127."""
    check_tensor("e", e)
    if e.dtype != torch.uint8:
        e = e.view(torch.uint8)
    ei = e.to(torch.int32)
    normal = (ei << 23).view(torch.float32)
    sub = torch.full_like(normal, 2.0**-127)  # e == 0: the fp32 subnormal 0x00400000
    out = torch.where(ei == 0, sub, normal)
    return torch.where(ei == UE8M0_NAN, torch.full_like(out, float("nan")), out)


def ue8m0_round_up(x: torch.Tensor) -> torch.Tensor:
    """Exponent byte of ``2^ceil(log2(x))`` for positive fp32 ``x`` (uint8).

    Adds one to the biased exponent when any mantissa bit is set. Subnormals round up to 2^-126
    (byte 1); zero gives byte 0 (2^-127, the smallest scale); Inf/NaN/too large give 0xFF.
    """
    b = _bits(x)
    exp = (b >> 23) & 0xFF
    mant = b & 0x7FFFFF
    e = exp + (mant != 0).to(torch.int32)
    bad = (exp == 0xFF) | (e > 254) | (x != x)
    e = torch.where(bad, torch.full_like(e, UE8M0_NAN), e)
    return e.to(torch.uint8)


def ue8m0_floor(x: torch.Tensor) -> torch.Tensor:
    """Biased exponent ``floor(log2(x))`` for positive normal fp32 ``x`` as int32 (0 for x <= 2^-126 subnormals/zero)."""
    b = _bits(x)
    return (b >> 23) & 0xFF


def pow2_round_up(x: torch.Tensor) -> torch.Tensor:
    """fp32 ``2^ceil(log2(x))`` for positive fp32 ``x``, by exponent-bit arithmetic."""
    return ue8m0_decode(ue8m0_round_up(x))
