"""compressed-tensors checkpoints (llm-compressor): FP8 per-channel and NVFP4.

FP8 per-channel ("float-quantized", strategy channel), per linear ``<prefix>``:

* ``<prefix>.weight``       float8_e4m3fn ``[N, K]``
* ``<prefix>.weight_scale`` fp32 ``[N, 1]`` (dequant ``w = f32(weight) * weight_scale``)
* ``<prefix>.input_scale``  fp32 scalar, optional

NVFP4 ("nvfp4-pack-quantized"):

* ``<prefix>.weight_packed``       uint8 ``[N, K/2]``, element 2i in the low nibble
* ``<prefix>.weight_scale``        float8_e4m3fn ``[N, K/16]``
* ``<prefix>.weight_global_scale`` fp32 scalar: the **inverse** of the ModelOpt ``weight_scale_2``
* ``<prefix>.input_global_scale``  fp32 scalar, optional (also an inverse)

The reader normalises to the multiplier form, ``global_scale = f32(1 / weight_global_scale)``.
fp32 reciprocals do not always round-trip (``1/(1/x) != x`` for about one value in eight), so
:func:`lowbit.io.read_layer` keeps the stored inverse and the writer accepts it back verbatim.
"""
from __future__ import annotations

from typing import Mapping

import torch

from lowbit._validate import check_tensor, require
from lowbit.formats.fp8 import FP8
from lowbit.formats.nvfp4 import GROUP_SIZE, NVFP4
from lowbit.io._tensors import get, get_scalar, name_of
from lowbit.io.modelopt import fp32_scalar


def read_fp8_channel(tensors: Mapping[str, torch.Tensor], prefix: str) -> FP8:
    """The per-row :class:`FP8` weight stored under ``prefix``."""
    data = get(tensors, prefix, "weight", dtypes=(torch.float8_e4m3fn,), ndim=2)
    scale = get(tensors, prefix, "weight_scale", dtypes=(torch.float32,), shape=(data.shape[0], 1))
    return FP8(data, scale, "row")


def write_fp8_channel(fmt: FP8, prefix: str, *, input_scale: torch.Tensor | float | None = None, scalar_shape: tuple = ()) -> dict[str, torch.Tensor]:
    """compressed-tensors FP8 per-channel tensors for a ``"row"`` :class:`FP8`."""
    require(isinstance(fmt, FP8) and fmt.granularity == "row",
            f"write_fp8_channel needs a per-row FP8, got {type(fmt).__name__} {getattr(fmt, 'granularity', '')}")
    out = {name_of(prefix, "weight"): fmt.data.contiguous(), name_of(prefix, "weight_scale"): fmt.scale.contiguous()}
    if input_scale is not None:
        out[name_of(prefix, "input_scale")] = fp32_scalar("input_scale", input_scale, scalar_shape)
    return out


def read_nvfp4_ct(tensors: Mapping[str, torch.Tensor], prefix: str) -> NVFP4:
    """The :class:`NVFP4` weight under ``prefix``, global scale normalised to the multiplier."""
    packed = get(tensors, prefix, "weight_packed", dtypes=(torch.uint8,), ndim=2)
    n, half_k = packed.shape
    require((half_k * 2) % GROUP_SIZE == 0, f"tensor {name_of(prefix, 'weight_packed')!r} has shape {tuple(packed.shape)}: K = {half_k * 2} is not a multiple of 16")
    scale = get(tensors, prefix, "weight_scale", dtypes=(torch.float8_e4m3fn,), shape=(n, half_k * 2 // GROUP_SIZE))
    inv = get_scalar(tensors, prefix, "weight_global_scale")
    require(bool(torch.isfinite(inv).all() and (inv > 0).all()),
            f"tensor {name_of(prefix, 'weight_global_scale')!r} must be finite and positive, got {inv.flatten().tolist()}")
    return NVFP4(packed, scale, (1.0 / inv.reshape(())).to(torch.float32), GROUP_SIZE)


def write_nvfp4_ct(
    fmt: NVFP4,
    prefix: str,
    *,
    weight_global_scale: torch.Tensor | None = None,
    input_global_scale: torch.Tensor | float | None = None,
    scalar_shape: tuple = (1,),
) -> dict[str, torch.Tensor]:
    """compressed-tensors NVFP4 tensors for ``fmt``.

    ``weight_global_scale`` defaults to ``f32(1 / fmt.global_scale)``; pass the stored inverse
    (its reciprocal must equal ``fmt.global_scale`` bit for bit) to write it back unchanged.
    """
    require(isinstance(fmt, NVFP4), f"write_nvfp4_ct needs an NVFP4, got {type(fmt).__name__}")
    require(tuple(scalar_shape) in ((), (1,)), f"scalar_shape must be () or (1,), got {scalar_shape}")
    if weight_global_scale is None:
        inv = (1.0 / fmt.global_scale).reshape(scalar_shape)
    else:
        check_tensor("weight_global_scale", weight_global_scale, dtypes=(torch.float32,))
        require(weight_global_scale.numel() == 1, f"weight_global_scale must be a scalar, got shape {tuple(weight_global_scale.shape)}")
        back = (1.0 / weight_global_scale.reshape(())).to(torch.float32)
        require(bool(back.view(torch.int32) == fmt.global_scale.reshape(()).view(torch.int32)),
                f"weight_global_scale={float(weight_global_scale.flatten()[0])!r} is not the stored inverse of global_scale={float(fmt.global_scale)!r}")
        inv = weight_global_scale.reshape(scalar_shape)
    out = {
        name_of(prefix, "weight_packed"): fmt.packed.contiguous(),
        name_of(prefix, "weight_scale"): fmt.scale.contiguous(),
        name_of(prefix, "weight_global_scale"): inv.contiguous(),
    }
    if input_global_scale is not None:
        out[name_of(prefix, "input_global_scale")] = fp32_scalar("input_global_scale", input_global_scale, scalar_shape)
    return out
