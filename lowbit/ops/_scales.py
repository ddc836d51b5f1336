"""Scale decoding shared by the Triton GEMM and quantizer kernels (``act_quant``, ``fp8_gemm``,
``fp4_gemm``): UE8M0 exponent bytes to fp32, and a scale load that takes fp32 or UE8M0."""
from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["e8m0_decode", "load_scale"]

# a @triton.jit function may only read module globals that are tl.constexpr
_F32_NAN_BITS = tl.constexpr(0x7FC00000)
_F32_2M127_BITS = tl.constexpr(0x00400000)  # 2^-127, the fp32 subnormal UE8M0 byte 0 decodes to


@triton.jit
def e8m0_decode(e):
    """UE8M0 byte (int32 0..255) -> fp32 2^(e-127); 0 -> 2^-127 (subnormal), 255 -> NaN."""
    bits = tl.where(e == 0, _F32_2M127_BITS, e << 23)
    bits = tl.where(e == 255, _F32_NAN_BITS, bits)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def load_scale(p, mask, E8M0: tl.constexpr):
    """fp32 scales at p (masked-off lanes 1.0); E8M0: UE8M0 bytes decoded to 2^(e-127)."""
    if E8M0:
        s = e8m0_decode(tl.load(p, mask=mask, other=127).to(tl.int32))
    else:
        s = tl.load(p, mask=mask, other=1.0)
    return s
