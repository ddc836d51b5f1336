"""NVFP4 (NVIDIA ModelOpt): E2M1 elements, one E4M3 scale per 16 along K, one fp32 global scale.

Tensors (ModelOpt checkpoint names in brackets):

* ``packed`` uint8 ``[N, K/2]`` [``weight``]: two E2M1 codes a byte, element 2i in the low nibble.
* ``scale`` float8_e4m3fn ``[N, K/16]`` [``weight_scale``]: row-major "linear" layout.
* ``global_scale`` fp32 0-d [``weight_scale_2``]: a *multiplier*.

Dequant: ``w[n, k] = e2m1(code[n, k]) * f32(scale[n, k // 16]) * global_scale``.

Quantize (ModelOpt rule): ``global_scale = amax(|W|) / (6 * 448)`` (1.0 for an all-zero W, so
nothing divides by zero); per block ``s = amax_blk / (6 * global_scale)``, ``s = 1`` where
``s == 0``, ``s = max(s, 2^-9)``, cast to E4M3 (saturating); code = RNE-E2M1 of
``w / (f32(s_e4m3) * global_scale)``. The group size is 16, always.
"""
from __future__ import annotations

import dataclasses

import torch

from lowbit._validate import check_tensor, require
from lowbit.formats._base import TensorFormat, require_finite
from lowbit.formats.e2m1 import E2M1_MAX, e2m1_pack, e2m1_unpack
from lowbit.formats.fp8 import E4M3_MAX, e4m3_saturate

GROUP_SIZE = 16
_SCALE_FLOOR = 2.0**-9


@dataclasses.dataclass(frozen=True)
class NVFP4(TensorFormat):
    packed: torch.Tensor
    scale: torch.Tensor
    global_scale: torch.Tensor
    group_size: int = GROUP_SIZE

    def __post_init__(self):
        require(self.group_size == GROUP_SIZE, f"NVFP4 group size must be 16, got {self.group_size}")
        check_tensor("packed", self.packed, dtypes=(torch.uint8,), ndim=2)
        check_tensor("scale", self.scale, dtypes=(torch.float8_e4m3fn,), ndim=2)
        check_tensor("global_scale", self.global_scale, dtypes=(torch.float32,), ndim=0)
        n, half_k = self.packed.shape
        require(self.scale.shape == (n, half_k * 2 // GROUP_SIZE) and (half_k * 2) % GROUP_SIZE == 0,
                f"NVFP4 scale has shape {tuple(self.scale.shape)}, expected ({n}, {half_k * 2 // GROUP_SIZE}) for packed {tuple(self.packed.shape)} (K must be a multiple of 16)")

    @property
    def shape(self) -> torch.Size:
        return torch.Size((self.packed.shape[0], self.packed.shape[1] * 2))

    @classmethod
    def quantize(cls, w: torch.Tensor, global_scale: torch.Tensor | float | None = None, group_size: int = GROUP_SIZE) -> "NVFP4":
        """Quantize a 2-D float weight ``[N, K]`` (K % 16 == 0) by the ModelOpt rule.

        ``global_scale`` may be given (e.g. a calibrated one); by default ``amax / (6*448)``.

        ``w`` must be finite and non-empty, ``global_scale`` positive and finite: anything else is
        a ``ValueError`` naming it (one inf would make the global scale inf and every value NaN).
        """
        check_tensor("w", w, ndim=2)
        require(w.is_floating_point(), f"w must be floating point, got {w.dtype}")
        require(type(group_size) is int and group_size == GROUP_SIZE, f"NVFP4 group size must be 16, got {group_size!r}")
        n, k = w.shape
        require(k % GROUP_SIZE == 0, f"NVFP4 needs K % 16 == 0, got K={k} (shape {tuple(w.shape)})")
        require(n > 0 and k > 0, f"NVFP4 needs a non-empty weight, got shape {tuple(w.shape)}")
        require_finite("w", w)
        wf = w.float()
        if global_scale is None:
            amax = wf.abs().amax()
            gs = amax / torch.full_like(amax, E2M1_MAX * E4M3_MAX)  # true division on every device
            gs = torch.where(gs > 0, gs, torch.ones_like(gs))
        else:
            require(isinstance(global_scale, (torch.Tensor, float, int)) and not isinstance(global_scale, bool),
                    f"global_scale must be a number or a one-element tensor, got {type(global_scale).__name__}")
            require(not isinstance(global_scale, torch.Tensor) or global_scale.numel() == 1,
                    f"global_scale must have one element, got shape {tuple(global_scale.shape) if isinstance(global_scale, torch.Tensor) else ()}")
            gs = torch.as_tensor(global_scale, dtype=torch.float32, device=w.device).reshape(())
            require(gs.numel() == 1 and bool(gs > 0) and bool(torch.isfinite(gs)),
                    f"global_scale must be positive and finite, got {float(gs)}")
        blocks = wf.view(n, k // GROUP_SIZE, GROUP_SIZE)
        s = blocks.abs().amax(-1) / (E2M1_MAX * gs)
        s = torch.where(s == 0, torch.ones_like(s), s).clamp_min(_SCALE_FLOOR)
        scale = e4m3_saturate(s)
        denom = scale.float() * gs
        packed = e2m1_pack((blocks / denom.unsqueeze(-1)).view(n, k))
        return cls(packed, scale, gs.reshape(()).clone(), GROUP_SIZE)

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        vals = e2m1_unpack(self.packed)  # [N, K] fp32
        n, k = vals.shape
        s = self.scale.float() * self.global_scale
        return (vals.view(n, k // GROUP_SIZE, GROUP_SIZE) * s.unsqueeze(-1)).view(n, k).to(dtype)

    def swizzled_scale(self) -> torch.Tensor:
        """``scale`` in the CUTLASS/cuBLAS 128x4 swizzled layout (see :func:`swizzle_scales`)."""
        return swizzle_scales(self.scale)


def swizzle_scales(scale: torch.Tensor) -> torch.Tensor:
    """Linear ``[R, C]`` block scales -> the 128x4 swizzled layout, shape ``[Rp, Cp]``.

    Rows are padded to a multiple of 128 and columns to a multiple of 4 (zeros), then
    ``reshape(Rp/128, 4, 32, Cp/4, 4).permute(0, 3, 2, 1, 4)``, stored contiguously as ``[Rp, Cp]``.
    """
    check_tensor("scale", scale, ndim=2)
    rows, cols = scale.shape
    rp, cp = -(-rows // 128) * 128, -(-cols // 4) * 4
    padded = torch.zeros(rp, cp, dtype=scale.dtype, device=scale.device)
    padded[:rows, :cols] = scale
    tiles = padded.view(rp // 128, 4, 32, cp // 4, 4).permute(0, 3, 2, 1, 4)
    return tiles.contiguous().view(rp, cp)


def unswizzle_scales(swizzled: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """Exact inverse of :func:`swizzle_scales`: back to the linear ``[rows, cols]`` layout."""
    check_tensor("swizzled", swizzled, ndim=2)
    rp, cp = swizzled.shape
    require(rp % 128 == 0 and cp % 4 == 0, f"swizzled scales must be [128*a, 4*b], got {tuple(swizzled.shape)}")
    require(rows <= rp and cols <= cp and rp - rows < 128 and cp - cols < 4,
            f"rows={rows}, cols={cols} do not match the swizzled shape {tuple(swizzled.shape)}")
    tiles = swizzled.view(rp // 128, cp // 4, 32, 4, 4).permute(0, 3, 2, 1, 4)
    return tiles.contiguous().view(rp, cp)[:rows, :cols].contiguous()
