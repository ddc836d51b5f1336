"""Bit layouts and quantizers (pure PyTorch, no Triton).

Element codecs: :mod:`~lowbit.formats.e2m1` (FP4), :mod:`~lowbit.formats.fp8` (E4M3 saturating
cast), :mod:`~lowbit.formats.e8m0` (UE8M0 scales). Weight formats, each a frozen dataclass with
``quantize`` / ``dequantize`` / ``to`` / ``nbytes``: :class:`NVFP4`, :class:`MXFP4`, :class:`FP8`,
:class:`INTx`.
"""
from lowbit.formats.e2m1 import (
    E2M1_MAX,
    E2M1_VALUES,
    e2m1_decode,
    e2m1_encode,
    e2m1_pack,
    e2m1_unpack,
    pack_nibbles,
    unpack_nibbles,
)
from lowbit.formats.e8m0 import pow2_round_up, ue8m0_decode, ue8m0_round_up
from lowbit.formats.fp8 import E4M3_MAX, FP8, e4m3_saturate, fp8_scale_from_amax
from lowbit.formats.intx import INTx, pack_planes, unpack_planes
from lowbit.formats.mxfp4 import MXFP4, mx_scale_exponent
from lowbit.formats.nvfp4 import NVFP4, swizzle_scales, unswizzle_scales

__all__ = [
    "E2M1_MAX", "E2M1_VALUES", "E4M3_MAX", "FP8", "INTx", "MXFP4", "NVFP4",
    "e2m1_decode", "e2m1_encode", "e2m1_pack", "e2m1_unpack", "e4m3_saturate",
    "fp8_scale_from_amax", "mx_scale_exponent", "pack_nibbles", "pack_planes", "pow2_round_up",
    "swizzle_scales", "ue8m0_decode", "ue8m0_round_up", "unpack_nibbles", "unpack_planes",
    "unswizzle_scales",
]
