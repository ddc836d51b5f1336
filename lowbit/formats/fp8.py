"""FP8 (E4M3) values with fp32 or power-of-two (UE8M0) scales at four granularities.

* ``"tensor"``: one scale, ``scale`` fp32 0-d.
* ``"row"``: one scale per output row (compressed-tensors FP8 lm_heads), ``scale`` fp32 ``[N, 1]``.
* ``"block"``: one scale per 128x128 tile (DeepSeek weights), ``scale`` fp32 ``[ceil(N/128), ceil(K/128)]``.
* ``"group"``: one scale per 1 x block_size run along the last dim (activations), ``scale``
  fp32 ``[..., K/block_size]``.

Scale rule: ``s = max(amax, 1e-4) / 448``; with ``scale_fmt="ue8m0"`` it is rounded UP to a power
of two, ``2^ceil(log2(amax * f32(1/448)))``, by exponent-bit arithmetic. Values are
``e4m3(clamp(x / s, -448, 448))``. Dequant: ``f32(data) * s``.
"""
from __future__ import annotations

import dataclasses
import math

import torch

from lowbit._validate import check_tensor, require
from lowbit.formats._base import TensorFormat, require_finite, require_int
from lowbit.formats.e8m0 import pow2_round_up

E4M3_MAX = 448.0
AMAX_FLOOR = 1e-4
GRANULARITIES = ("tensor", "row", "block", "group")
SCALE_FMTS = (None, "ue8m0")


def e4m3_saturate(x: torch.Tensor) -> torch.Tensor:
    """Cast to ``float8_e4m3fn`` with saturation at +-448 (NaN stays NaN), RNE."""
    check_tensor("x", x)
    return x.float().clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)


def fp8_scale_from_amax(amax: torch.Tensor, scale_fmt: str | None = None) -> torch.Tensor:
    """fp32 scale from a block amax: ``max(amax, 1e-4) / 448``, or its power-of-two round-up."""
    require(scale_fmt in SCALE_FMTS, f"scale_fmt must be one of {SCALE_FMTS}, got {scale_fmt!r}")
    amax = amax.float().clamp_min(AMAX_FLOOR)
    if scale_fmt == "ue8m0":
        return pow2_round_up(amax * torch.tensor(1.0 / E4M3_MAX, dtype=torch.float32))
    # Divide by a tensor, not a Python float: CUDA turns tensor / scalar into a multiply by the
    # reciprocal, which is not bit-exact with the true division the CPU and the kernels do.
    return amax / torch.full_like(amax, E4M3_MAX)


@dataclasses.dataclass(frozen=True)
class FP8(TensorFormat):
    """E4M3 data ``[N, K]`` (or ``[..., K]`` for ``"group"``) with scales per ``granularity``."""

    data: torch.Tensor
    scale: torch.Tensor
    granularity: str = "row"
    block_size: int = 128
    scale_fmt: str | None = None

    def __post_init__(self):
        check_tensor("data", self.data, dtypes=(torch.float8_e4m3fn,))
        check_tensor("scale", self.scale, dtypes=(torch.float32,))
        require(self.granularity in GRANULARITIES, f"granularity must be one of {GRANULARITIES}, got {self.granularity!r}")
        require(self.scale_fmt in SCALE_FMTS, f"scale_fmt must be one of {SCALE_FMTS}, got {self.scale_fmt!r}")
        require_int("block_size", self.block_size)
        require(self.block_size > 0, f"block_size must be positive, got {self.block_size}")
        require(self.scale.shape == self.expected_scale_shape(self.data.shape),
                f"FP8 {self.granularity} scale has shape {tuple(self.scale.shape)}, expected {self.expected_scale_shape(self.data.shape)} for data {tuple(self.data.shape)}")

    def expected_scale_shape(self, shape) -> tuple:
        if self.granularity == "tensor":
            return ()
        if self.granularity == "row":
            return (shape[0], 1)
        if self.granularity == "block":
            return (math.ceil(shape[0] / self.block_size), math.ceil(shape[1] / self.block_size))
        return (*shape[:-1], shape[-1] // self.block_size)

    @property
    def shape(self) -> torch.Size:
        return self.data.shape

    @classmethod
    def quantize(cls, w: torch.Tensor, granularity: str = "row", block_size: int = 128, scale_fmt: str | None = None) -> "FP8":
        """Quantize a float tensor. ``"row"`` / ``"block"`` / ``"tensor"`` need 2-D ``w``.

        Non-finite input: the weight granularities (``"row"`` / ``"block"`` / ``"tensor"``)
        refuse a NaN / inf with a ``ValueError`` naming its index (it would make a scale, and
        every value sharing it, non-finite). ``"group"`` (activations) follows the activation
        quantizer's NaN policy instead (``lowbit.ops.act_quant``, whose reference this is): a group
        holding a NaN / inf gets a non-finite scale and NaN values, the other groups are unaffected.
        Empty input: ``"group"`` returns an empty FP8 (an empty batch of activations); the weight
        granularities need N > 0 and K > 0 (``ValueError``).
        """
        check_tensor("w", w)
        require(w.is_floating_point(), f"w must be floating point, got {w.dtype}")
        require(granularity in GRANULARITIES, f"granularity must be one of {GRANULARITIES}, got {granularity!r}")
        require(scale_fmt in SCALE_FMTS, f"scale_fmt must be one of {SCALE_FMTS}, got {scale_fmt!r}")
        require_int("block_size", block_size)
        require(block_size > 0, f"block_size must be positive, got {block_size}")
        wf = w.float()
        if granularity == "group":
            require(w.dim() >= 1 and w.shape[-1] % block_size == 0,
                    f"group quantization needs the last dim to be a multiple of block_size={block_size}, got shape {tuple(w.shape)}")
            blocks = wf.unflatten(-1, (-1, block_size))
            scale = fp8_scale_from_amax(blocks.abs().amax(-1), scale_fmt)
            data = e4m3_saturate(blocks / scale.unsqueeze(-1)).flatten(-2)
            return cls(data, scale, granularity, block_size, scale_fmt)
        require(w.dim() == 2, f"{granularity} quantization needs a 2-D weight, got shape {tuple(w.shape)}")
        require(w.shape[0] > 0 and w.shape[1] > 0, f"{granularity} quantization needs a non-empty weight, got shape {tuple(w.shape)}")
        require_finite("w", w)
        if granularity == "tensor":
            scale = fp8_scale_from_amax(wf.abs().amax(), scale_fmt)
            return cls(e4m3_saturate(wf / scale), scale, granularity, block_size, scale_fmt)
        if granularity == "row":
            scale = fp8_scale_from_amax(wf.abs().amax(-1, keepdim=True), scale_fmt)
            return cls(e4m3_saturate(wf / scale), scale, granularity, block_size, scale_fmt)
        n, k = w.shape
        bs = block_size
        nb, kb = math.ceil(n / bs), math.ceil(k / bs)
        padded = torch.zeros(nb * bs, kb * bs, dtype=torch.float32, device=w.device)
        padded[:n, :k] = wf
        tiles = padded.view(nb, bs, kb, bs)
        scale = fp8_scale_from_amax(tiles.abs().amax(dim=(1, 3)), scale_fmt)
        data = e4m3_saturate(tiles / scale[:, None, :, None]).view(nb * bs, kb * bs)[:n, :k].contiguous()
        return cls(data, scale, granularity, block_size, scale_fmt)

    def expanded_scale(self) -> torch.Tensor:
        """The scale broadcast to ``data``'s shape (fp32)."""
        if self.granularity in ("tensor", "row"):
            return self.scale.expand(self.data.shape)
        if self.granularity == "group":
            return self.scale.repeat_interleave(self.block_size, dim=-1)
        n, k = self.data.shape
        bs = self.block_size
        return self.scale.repeat_interleave(bs, 0).repeat_interleave(bs, 1)[:n, :k]

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return (self.data.float() * self.expanded_scale()).to(dtype)
