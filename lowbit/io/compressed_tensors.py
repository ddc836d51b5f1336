"""compressed-tensors checkpoints (llm-compressor): FP8 (per tensor, per channel, 128x128 blocks)
and NVFP4.

FP8 ("float-quantized", num_bits 8, type float), per linear ``<prefix>``:

* ``<prefix>.weight``       float8_e4m3fn ``[N, K]``
* ``<prefix>.weight_scale`` the multiplier, ``w = f32(weight) * weight_scale`` broadcast per
  strategy: ``tensor`` -> shape ``()`` or ``(1,)``; ``channel`` -> ``[N, 1]``; ``block``
  (block_structure ``[128, 128]``) -> ``[ceil(N/128), ceil(K/128)]``. Stored in fp32, or in the
  model's dtype (bf16 / fp16: llm-compressor's ``FP8_DYNAMIC`` of a bf16 model); a bf16 / fp16
  value is always exactly an fp32 one, so the cast to fp32 is exact and the layer reads (and
  writes back) bit-exact. The strategy is told apart by the scale's shape (a 1-row weight whose
  channel and block scales coincide reads as ``channel``: both dequantize alike); other block
  sizes are refused.
* ``<prefix>.input_scale``  fp32 scalar, optional (static activation scales)

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

import math
from typing import Mapping

import torch

from lowbit._validate import check_tensor, require
from lowbit.formats.fp8 import FP8
from lowbit.formats.nvfp4 import GROUP_SIZE, NVFP4
from lowbit.io._tensors import get, get_scalar, name_of
from lowbit.io.modelopt import fp32_scalar


#: dtypes a compressed-tensors FP8 ``weight_scale`` is stored in (each casts to fp32 exactly)
SCALE_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
FP8_BLOCK = 128


def fp8_strategy(tensors: Mapping[str, torch.Tensor], prefix: str) -> str:
    """``"tensor"``, ``"channel"`` or ``"block"``: the compressed-tensors FP8 strategy of the layer
    under ``prefix``, from its ``weight_scale``'s shape (ValueError naming both shapes otherwise)."""
    data = get(tensors, prefix, "weight", dtypes=(torch.float8_e4m3fn,), ndim=2)
    scale = get(tensors, prefix, "weight_scale", dtypes=SCALE_DTYPES)
    n, k = data.shape
    shape = tuple(scale.shape)
    if shape in ((), (1,)):
        return "tensor"
    if shape == (n, 1):
        return "channel"
    if shape == (math.ceil(n / FP8_BLOCK), math.ceil(k / FP8_BLOCK)):
        return "block"
    raise ValueError(
        f"tensor {name_of(prefix, 'weight_scale')!r} has shape {shape} for an FP8 weight {(n, k)}: not a compressed-tensors "
        f"FP8 layout lowbit reads (strategy tensor: () or (1,); channel: {(n, 1)}; block 128x128: "
        f"{(math.ceil(n / FP8_BLOCK), math.ceil(k / FP8_BLOCK))})")


def _scale_fp32(scale: torch.Tensor) -> torch.Tensor:
    return scale if scale.dtype == torch.float32 else scale.to(torch.float32)  # exact from bf16 / fp16


def read_fp8_ct(tensors: Mapping[str, torch.Tensor], prefix: str) -> FP8:
    """The :class:`FP8` weight under ``prefix``, any compressed-tensors strategy (``"tensor"``,
    ``"row"`` for channel, ``"block"`` 128); the scale cast exactly to fp32."""
    strategy = fp8_strategy(tensors, prefix)
    data = tensors[name_of(prefix, "weight")]
    scale = _scale_fp32(tensors[name_of(prefix, "weight_scale")])
    if strategy == "tensor":
        return FP8(data, scale.reshape(()), "tensor")
    if strategy == "channel":
        return FP8(data, scale, "row")
    return FP8(data, scale, "block", FP8_BLOCK)


def read_fp8_channel(tensors: Mapping[str, torch.Tensor], prefix: str) -> FP8:
    """The per-row :class:`FP8` weight stored under ``prefix`` (fp32, bf16 or fp16 scale)."""
    data = get(tensors, prefix, "weight", dtypes=(torch.float8_e4m3fn,), ndim=2)
    scale = get(tensors, prefix, "weight_scale", dtypes=SCALE_DTYPES, shape=(data.shape[0], 1))
    return FP8(data, _scale_fp32(scale), "row")


def _stored_scale(fmt: FP8, prefix: str, scale_dtype: torch.dtype, shape: tuple) -> torch.Tensor:
    require(scale_dtype in SCALE_DTYPES, f"scale_dtype must be one of {list(SCALE_DTYPES)}, got {scale_dtype}")
    scale = fmt.scale.reshape(shape)
    if scale_dtype != torch.float32:
        cast = scale.to(scale_dtype)
        require(bool(torch.equal(cast.to(torch.float32).view(torch.int32), scale.view(torch.int32))),
                f"{name_of(prefix, 'weight_scale')}: the scales are not all exactly representable in {scale_dtype}; "
                "write them as torch.float32")
        scale = cast
    return scale.contiguous()


def write_fp8_channel(fmt: FP8, prefix: str, *, input_scale: torch.Tensor | float | None = None, scalar_shape: tuple = (),
                      scale_dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """compressed-tensors FP8 per-channel tensors for a ``"row"`` :class:`FP8`; ``scale_dtype``
    bf16 / fp16 only where every scale is exact in it (ValueError otherwise)."""
    require(isinstance(fmt, FP8) and fmt.granularity == "row",
            f"write_fp8_channel needs a per-row FP8, got {type(fmt).__name__} {getattr(fmt, 'granularity', '')}")
    return write_fp8_ct(fmt, prefix, input_scale=input_scale, scalar_shape=scalar_shape, scale_dtype=scale_dtype)


def write_fp8_ct(fmt: FP8, prefix: str, *, input_scale: torch.Tensor | float | None = None, scalar_shape: tuple = (),
                 scale_dtype: torch.dtype = torch.float32, scale_shape: tuple = (1,)) -> dict[str, torch.Tensor]:
    """compressed-tensors FP8 tensors for a ``"tensor"`` (``weight_scale`` of shape
    ``scale_shape``, ``()`` or ``(1,)``), ``"row"`` or 128-``"block"`` :class:`FP8`."""
    require(isinstance(fmt, FP8) and (fmt.granularity in ("tensor", "row") or (fmt.granularity == "block" and fmt.block_size == FP8_BLOCK)),
            f"compressed-tensors FP8 is per tensor, per row or in 128x128 blocks, got {type(fmt).__name__} "
            f"{getattr(fmt, 'granularity', '')} {getattr(fmt, 'block_size', '')}")
    if fmt.granularity == "tensor":
        require(tuple(scale_shape) in ((), (1,)), f"scale_shape must be () or (1,), got {scale_shape}")
        shape = tuple(scale_shape)
    else:
        shape = tuple(fmt.scale.shape)
    out = {name_of(prefix, "weight"): fmt.data.contiguous(), name_of(prefix, "weight_scale"): _stored_scale(fmt, prefix, scale_dtype, shape)}
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
