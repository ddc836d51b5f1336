"""Pure-PyTorch definitions of ``act_quant``, ``fp4_act_quant`` and ``weight_dequant`` (no Triton).

These are the spec (SPEC.md §5) made executable and the CPU path. ``act_quant`` *is*
:meth:`lowbit.formats.FP8.quantize` with granularity ``"group"``; the FP4 variants reuse the E2M1 /
UE8M0 codecs of :mod:`lowbit.formats`.
"""
from __future__ import annotations

import torch

from lowbit.formats.e2m1 import E2M1_MAX, e2m1_decode, e2m1_encode, pack_nibbles, unpack_nibbles
from lowbit.formats.e8m0 import ue8m0_decode, ue8m0_round_up
from lowbit.formats.fp8 import FP8, e4m3_saturate

#: fp4_act_quant amax floor (SPEC §5): keeps the UE8M0 scale at or above 2^-126.
FP4_AMAX_FLOOR = 6.0 * 2.0**-126
#: Smallest E4M3 scale for the ``scale_fmt="e4m3"`` variant (the smallest E4M3 subnormal, as NVFP4
#: does): a zero scale would turn an all-zero block into 0/0.
E4M3_SCALE_FLOOR = 2.0**-9


def act_quant_ref(x: torch.Tensor, block_size: int = 128, scale_fmt: str | None = None, e8m0_scale: bool = False):
    """``(y e4m3 [..., K], s [..., K/block_size])``; ``s`` fp32, or float8_e8m0fnu if ``e8m0_scale``."""
    q = FP8.quantize(x, "group", block_size, scale_fmt)
    s = q.scale
    if e8m0_scale:
        s = ue8m0_round_up(s).view(torch.float8_e8m0fnu)  # exact: s is already a power of two
    return q.data, s


def act_quant_dequant_ref(x: torch.Tensor, block_size: int = 128, scale_fmt: str | None = None) -> torch.Tensor:
    """``x.dtype(f32(e4m3(clamp(x / s))) * s)``: the quantize-dequantize round trip (new tensor)."""
    return FP8.quantize(x, "group", block_size, scale_fmt).dequantize(x.dtype)


def fp4_scale_ref(amax: torch.Tensor, scale_fmt: str) -> torch.Tensor:
    """Block scale from fp32 amax: UE8M0 bytes (``"ue8m0"``) or E4M3 (``"e4m3"``)."""
    amax = amax.float()
    if scale_fmt == "ue8m0":
        floored = torch.where(amax < FP4_AMAX_FLOOR, torch.full_like(amax, FP4_AMAX_FLOOR), amax)  # NaN stays NaN
        return ue8m0_round_up(floored * torch.tensor(1.0 / E2M1_MAX, dtype=torch.float32)).view(torch.float8_e8m0fnu)
    s = amax / E2M1_MAX
    s = torch.where(s < E4M3_SCALE_FLOOR, torch.full_like(s, E4M3_SCALE_FLOOR), s)
    return e4m3_saturate(s)


def scale_to_f32(s: torch.Tensor) -> torch.Tensor:
    """fp32 value of a scale tensor: float8_e8m0fnu or uint8 (UE8M0 bytes) decode, else ``.float()``."""
    if s.dtype in (torch.float8_e8m0fnu, torch.uint8):
        return ue8m0_decode(s)
    return s.float()


def fp4_act_quant_ref(x: torch.Tensor, block_size: int = 32, scale_fmt: str = "ue8m0"):
    """``(packed uint8 [..., K/2], s [..., K/block_size])``: element 2i in the low nibble;
    ``s`` float8_e8m0fnu (``"ue8m0"``) or float8_e4m3fn (``"e4m3"``).

    ``code = E2M1(clamp(x / s, -6, 6))`` with ``x / s`` in fp32.
    """
    blocks = x.float().unflatten(-1, (-1, block_size))
    s = fp4_scale_ref(blocks.abs().amax(-1), scale_fmt)
    v = (blocks / scale_to_f32(s).unsqueeze(-1)).clamp(-E2M1_MAX, E2M1_MAX)
    return pack_nibbles(e2m1_encode(v.flatten(-2))), s


def fp4_dequant_ref(packed: torch.Tensor, s: torch.Tensor, block_size: int, dtype: torch.dtype) -> torch.Tensor:
    """Inverse of :func:`fp4_act_quant_ref`: ``e2m1(code) * f32(s)`` in ``dtype``."""
    vals = e2m1_decode(unpack_nibbles(packed)).unflatten(-1, (-1, block_size))
    return (vals * scale_to_f32(s).unsqueeze(-1)).flatten(-2).to(dtype)


def fp4_act_quant_dequant_ref(x: torch.Tensor, block_size: int = 32, scale_fmt: str = "ue8m0") -> torch.Tensor:
    packed, s = fp4_act_quant_ref(x, block_size, scale_fmt)
    return fp4_dequant_ref(packed, s, block_size, x.dtype)


def weight_dequant_ref(w: torch.Tensor, s: torch.Tensor, block_size: int = 128, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """``w[n, k] * s[n // block_size, k // block_size]`` in fp32, cast to ``dtype``."""
    n, k = w.shape
    sf = scale_to_f32(s)
    full = sf.repeat_interleave(block_size, 0).repeat_interleave(block_size, 1)[:n, :k]
    return (w.float() * full).to(dtype)
