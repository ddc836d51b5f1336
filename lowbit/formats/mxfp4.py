"""MXFP4 (OCP MX v1.0): E2M1 elements with one UE8M0 scale per 32 along K.

Tensors: ``packed`` uint8 ``[N, K/2]`` (element 2i in the low nibble), ``scale`` uint8
``[N, K/32]`` holding UE8M0 exponent bytes. Dequant ``w = e2m1(code) * 2^(e - 127)``; e = 0xFF
gives NaN.

Scale choice (``rounding``):

* ``"floor"`` (OCP, default): ``e = floor(log2(amax)) - 2`` (6 = 1.5 * 2^2, so the block max lands
  in [4, 8) and values above 6 saturate), computed from amax's exponent bits.
* ``"ceil"``: ``e = ceil(log2(amax * f32(1/6)))``: never saturates.

An all-zero block gets the smallest scale, byte 0 (2^-127): zeros are exact at any scale.
Blocks whose amax is subnormal in fp32 also get byte 0.
"""
from __future__ import annotations

import dataclasses

import torch

from lowbit._validate import check_tensor, require
from lowbit.formats._base import TensorFormat, require_finite
from lowbit.formats.e2m1 import e2m1_pack, e2m1_unpack
from lowbit.formats.e8m0 import ue8m0_decode, ue8m0_floor, ue8m0_round_up

GROUP_SIZE = 32
ROUNDINGS = ("floor", "ceil")


def mx_scale_exponent(amax: torch.Tensor, rounding: str = "floor") -> torch.Tensor:
    """UE8M0 byte for blocks with the given fp32 amax (uint8)."""
    require(rounding in ROUNDINGS, f"rounding must be one of {ROUNDINGS}, got {rounding!r}")
    amax = amax.float()
    if rounding == "ceil":
        return ue8m0_round_up(amax * torch.tensor(1.0 / 6.0, dtype=torch.float32))
    e = ue8m0_floor(amax) - 2
    e = torch.where(ue8m0_floor(amax) == 0, torch.zeros_like(e), e).clamp(0, 254)
    e = torch.where(torch.isfinite(amax), e, torch.full_like(e, 0xFF))
    return e.to(torch.uint8)


@dataclasses.dataclass(frozen=True)
class MXFP4(TensorFormat):
    packed: torch.Tensor
    scale: torch.Tensor
    rounding: str = "floor"
    group_size: int = GROUP_SIZE

    def __post_init__(self):
        require(self.group_size == GROUP_SIZE, f"MXFP4 group size must be 32, got {self.group_size}")
        require(self.rounding in ROUNDINGS, f"rounding must be one of {ROUNDINGS}, got {self.rounding!r}")
        check_tensor("packed", self.packed, dtypes=(torch.uint8,), ndim=2)
        check_tensor("scale", self.scale, dtypes=(torch.uint8,), ndim=2)
        n, half_k = self.packed.shape
        require((half_k * 2) % GROUP_SIZE == 0 and self.scale.shape == (n, half_k * 2 // GROUP_SIZE),
                f"MXFP4 scale has shape {tuple(self.scale.shape)}, expected ({n}, {half_k * 2 // GROUP_SIZE}) for packed {tuple(self.packed.shape)} (K must be a multiple of 32)")

    @property
    def shape(self) -> torch.Size:
        return torch.Size((self.packed.shape[0], self.packed.shape[1] * 2))

    @classmethod
    def quantize(cls, w: torch.Tensor, rounding: str = "floor", group_size: int = GROUP_SIZE) -> "MXFP4":
        """Quantize a 2-D float weight ``[N, K]`` (K % 32 == 0).

        ``w`` must be finite (a NaN / inf is refused with a ``ValueError`` naming its index: it
        would give its block the NaN scale byte 0xFF). Empty input (N = 0 or K = 0) gives an
        empty MXFP4.
        """
        check_tensor("w", w, ndim=2)
        require(w.is_floating_point(), f"w must be floating point, got {w.dtype}")
        require_finite("w", w)
        require(type(group_size) is int and group_size == GROUP_SIZE, f"MXFP4 group size must be 32, got {group_size}")
        require(rounding in ROUNDINGS, f"rounding must be one of {ROUNDINGS}, got {rounding!r}")
        n, k = w.shape
        require(k % GROUP_SIZE == 0, f"MXFP4 needs K % 32 == 0, got K={k} (shape {tuple(w.shape)})")
        blocks = w.float().view(n, k // GROUP_SIZE, GROUP_SIZE)
        scale = mx_scale_exponent(blocks.abs().amax(-1), rounding)
        packed = e2m1_pack((blocks / ue8m0_decode(scale).unsqueeze(-1)).view(n, k))
        return cls(packed, scale, rounding, GROUP_SIZE)

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        vals = e2m1_unpack(self.packed)
        n, k = vals.shape
        s = ue8m0_decode(self.scale)
        return (vals.view(n, k // GROUP_SIZE, GROUP_SIZE) * s.unsqueeze(-1)).view(n, k).to(dtype)
