"""DeepSeek checkpoints: FP8 weights with 128x128 block scales, FP4 (MXFP4) experts.

FP8, per linear ``<prefix>``:

* ``<prefix>.weight``            float8_e4m3fn ``[N, K]``
* ``<prefix>.weight_scale_inv``  ``[ceil(N/128), ceil(K/128)]``, fp32 or float8_e8m0fnu. Despite
  the name it is a *multiplier*: ``w = f32(weight) * s[n // 128, k // 128]``. The V3.2 inference
  code renames it ``<prefix>.scale``; either name is read (not both).

FP4 experts:

* ``<prefix>.weight`` ``[N, K/2]``: two E2M1 codes a byte, element 2i in the low nibble; dtype
  int8, uint8 or float4_e2m1fn_x2 (the same bytes)
* ``<prefix>.scale`` float8_e8m0fnu (or uint8) ``[N, K/32]``: UE8M0 exponents (``weight_scale_inv``
  is accepted too) -> :class:`lowbit.formats.MXFP4`.

UE8M0 scales are decoded to fp32 powers of two for :class:`~lowbit.formats.FP8` (``scale_fmt=
"ue8m0"``) and written back with an exact encoder, so ``2^-127`` (byte 0) survives the trip.
"""
from __future__ import annotations

import math
from typing import Mapping

import torch

from lowbit._validate import require
from lowbit.formats.e8m0 import ue8m0_decode
from lowbit.formats.fp8 import FP8
from lowbit.formats.mxfp4 import GROUP_SIZE as MX_GROUP, MXFP4
from lowbit.io._tensors import as_uint8, from_uint8, get, name_of, pick, pow2_to_ue8m0

BLOCK = 128
FP8_SCALE_NAMES = ("weight_scale_inv", "scale")
FP4_SCALE_NAMES = ("scale", "weight_scale_inv")
_FP4_WEIGHT_DTYPES = tuple(d for d in (torch.int8, torch.uint8, getattr(torch, "float4_e2m1fn_x2", None)) if d is not None)
_SCALE_DTYPES = (torch.float32, torch.float8_e8m0fnu)


def read_fp8_block(tensors: Mapping[str, torch.Tensor], prefix: str) -> FP8:
    """The 128x128-block :class:`FP8` weight under ``prefix`` (scale decoded to fp32)."""
    data = get(tensors, prefix, "weight", dtypes=(torch.float8_e4m3fn,), ndim=2)
    n, k = data.shape
    sname = pick(tensors, prefix, FP8_SCALE_NAMES)
    s = get(tensors, prefix, sname, dtypes=_SCALE_DTYPES, shape=(math.ceil(n / BLOCK), math.ceil(k / BLOCK)))
    if s.dtype == torch.float8_e8m0fnu:
        return FP8(data, ue8m0_decode(s), "block", BLOCK, "ue8m0")
    return FP8(data, s, "block", BLOCK, None)


def write_fp8_block(fmt: FP8, prefix: str, *, scale_name: str = "weight_scale_inv", scale_dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """DeepSeek tensors for a ``"block"`` :class:`FP8` with ``block_size=128``.

    ``scale_dtype=torch.float8_e8m0fnu`` needs power-of-two scales (ValueError otherwise).
    """
    require(isinstance(fmt, FP8) and fmt.granularity == "block" and fmt.block_size == BLOCK,
            f"write_fp8_block needs a 128x128-block FP8, got {type(fmt).__name__} {getattr(fmt, 'granularity', '')} {getattr(fmt, 'block_size', '')}")
    require(scale_name in FP8_SCALE_NAMES, f"scale_name must be one of {FP8_SCALE_NAMES}, got {scale_name!r}")
    require(scale_dtype in _SCALE_DTYPES, f"scale_dtype must be one of {list(_SCALE_DTYPES)}, got {scale_dtype}")
    sname = name_of(prefix, scale_name)
    scale = fmt.scale if scale_dtype == torch.float32 else from_uint8(pow2_to_ue8m0(fmt.scale, sname), scale_dtype)
    return {name_of(prefix, "weight"): fmt.data.contiguous(), sname: scale.contiguous()}


def read_fp4_experts(tensors: Mapping[str, torch.Tensor], prefix: str) -> MXFP4:
    """The :class:`MXFP4` weight under ``prefix`` (bytes shared with the checkpoint tensors)."""
    w = get(tensors, prefix, "weight", dtypes=_FP4_WEIGHT_DTYPES, ndim=2)
    n, half_k = w.shape
    require((half_k * 2) % MX_GROUP == 0, f"tensor {name_of(prefix, 'weight')!r} has shape {tuple(w.shape)}: K = {half_k * 2} is not a multiple of 32")
    sname = pick(tensors, prefix, FP4_SCALE_NAMES)
    s = get(tensors, prefix, sname, dtypes=(torch.float8_e8m0fnu, torch.uint8), shape=(n, half_k * 2 // MX_GROUP))
    return MXFP4(as_uint8(w), as_uint8(s), "floor", MX_GROUP)


def write_fp4_experts(
    fmt: MXFP4, prefix: str, *, weight_dtype: torch.dtype = torch.int8, scale_dtype: torch.dtype = torch.float8_e8m0fnu, scale_name: str = "scale"
) -> dict[str, torch.Tensor]:
    """DeepSeek FP4 expert tensors for ``fmt`` (same bytes, viewed as the requested dtypes)."""
    require(isinstance(fmt, MXFP4), f"write_fp4_experts needs an MXFP4, got {type(fmt).__name__}")
    require(weight_dtype in _FP4_WEIGHT_DTYPES, f"weight_dtype must be one of {list(_FP4_WEIGHT_DTYPES)}, got {weight_dtype}")
    require(scale_dtype in (torch.float8_e8m0fnu, torch.uint8), f"scale_dtype must be float8_e8m0fnu or uint8, got {scale_dtype}")
    require(scale_name in FP4_SCALE_NAMES, f"scale_name must be one of {FP4_SCALE_NAMES}, got {scale_name!r}")
    return {
        name_of(prefix, "weight"): from_uint8(fmt.packed.contiguous(), weight_dtype),
        name_of(prefix, scale_name): from_uint8(fmt.scale.contiguous(), scale_dtype),
    }
