"""Bit-level decoders shared by the gathered kernels (``cuda_core.py``, ``mma_nvfp4.py``): E2M1 codes,
E4M3 / UE8M0 scale bytes and E4M3 weight bytes to fp32 by integer arithmetic (NaN codes
included, identical on the GPU and in the interpreter), and the round-to-nearest-even cast of a
result to the output dtype."""
from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["cast_rne", "e2m1", "e2m1_f16", "e4m3", "fp8_data", "ue8m0"]


@triton.jit
def e2m1(c):
    """E2M1 codes (int32, low 4 bits) -> fp32. Codes 2..7 are normal: exponent (m>>1)-1, mantissa m&1."""
    m = c & 7
    normal = (((m >> 1) + 126) << 23) | ((m & 1) << 22)
    v = tl.where(m < 2, m.to(tl.float32) * 0.5, normal.to(tl.float32, bitcast=True))
    # the sign goes in as a bit: Triton's float negation is 0 - v, which turns code 0x8 into +0
    return (v.to(tl.int32, bitcast=True) | ((c & 8) << 28)).to(tl.float32, bitcast=True)


@triton.jit
def e2m1_f16(c):
    """E2M1 codes (int32, low 4 bits) -> fp32 value * 2^-14, in 5 integer ops and one convert:
    the 3 magnitude bits placed at fp16 bits 9..11 give exponent e and mantissa m, i.e.
    2^(e-15) (1 + m/2) for e >= 1 and the fp16 subnormal m * 2^-15 for e = 0, both exactly the
    E2M1 value times 2^-14; the sign goes to bit 15 (so code 0x8 is -0). Callers fold 2^14 into
    a scale (a power of two: exact)."""
    h = ((c & 7) << 9) | ((c & 8) << 12)
    return h.to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)


@triton.jit
def e4m3(b):
    """E4M3 bits (int32 0..255) -> fp32; exponent bias 7, subnormals m * 2^-9, 0x7F/0xFF NaN."""
    e = (b >> 3) & 15
    m = b & 7
    normal = ((e + 120) << 23) | (m << 20)
    v = tl.where(e == 0, m.to(tl.float32) * 0.001953125, normal.to(tl.float32, bitcast=True))
    v = tl.where((b & 0x7F) == 0x7F, float("nan"), v)
    return (v.to(tl.int32, bitcast=True) | ((b & 0x80) << 24)).to(tl.float32, bitcast=True)


@triton.jit
def fp8_data(b):
    """E4M3 weight elements (uint8 bits): the hardware convert (cvt on Hopper) plus the NaN code,
    which the interpreter would otherwise decode as 480."""
    v = b.to(tl.float8e4nv, bitcast=True).to(tl.float32)
    return tl.where((b.to(tl.int32) & 0x7F) == 0x7F, float("nan"), v)


@triton.jit
def ue8m0(e):
    """UE8M0 exponent bytes (int32) -> fp32 2^(e-127); e=0 is the subnormal 2^-127, 0xFF NaN."""
    v = tl.where(e == 0, 0x400000, e << 23).to(tl.float32, bitcast=True)
    return tl.where(e == 255, float("nan"), v)


@triton.jit
def cast_rne(v, ty, INTERPRET: tl.constexpr):
    """fp32 -> the output dtype, round-to-nearest-even. The interpreter truncates fp32 -> bf16,
    so there the rounding is done on the bits (the GPU's cvt.rn is already RNE)."""
    if INTERPRET:
        if ty == tl.bfloat16:
            b = v.to(tl.int32, bitcast=True)
            r = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).to(tl.int16).to(tl.bfloat16, bitcast=True)
            return tl.where(v != v, v.to(tl.bfloat16), r)
    return v.to(ty)
