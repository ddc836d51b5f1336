"""Activation quantizers of the DeepSeek-style GEMM family (SPEC.md §5) and ``weight_dequant``.

* :func:`act_quant`: FP8 E4M3 with one scale per 1 x ``block_size`` group along the last dim.
* :func:`fp4_act_quant`: packed E2M1 with one UE8M0 scale per 32 (MX-style) or one E4M3 scale per
  16 (NVFP4-style, no global scale).
* :func:`weight_dequant`: E4M3 weight with 128x128 block scales -> bf16.

Each public function validates, then runs the Triton kernel (CUDA tensors) or the PyTorch reference
(CPU tensors) — see :mod:`lowbit._backend`. All are registered as ``torch.library`` custom ops
(``lowbit::act_quant``, ``lowbit::act_quant_``, ``lowbit::fp4_act_quant``, ``lowbit::fp4_act_quant_``,
``lowbit::weight_dequant``) and go through them under ``torch.compile``; in eager mode the op
wrapper is bypassed to save its dispatch cost at decode sizes (same code underneath).

NaN policy: a NaN anywhere in a group makes that group's scale NaN (UE8M0 byte 0xFF) and all its
FP8 values NaN; in the FP4 variants its codes are 0 (E2M1 has no NaN) under the NaN scale, so the
group dequantizes to NaN. ``±Inf`` inputs give an Inf (fp32) or NaN (UE8M0) scale. Values past the
E4M3 range saturate to ±448 (FP4: ±6).
"""
from __future__ import annotations

from typing import Optional

import torch

from lowbit._backend import use_triton
from lowbit._validate import check_bool, check_tensor, require
from lowbit.ops.act_quant import reference as _ref

__all__ = ["act_quant", "fp4_act_quant", "weight_dequant"]

_FLOAT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_E8M0 = torch.float8_e8m0fnu


def _is_pow2(n: int) -> bool:
    return isinstance(n, int) and not isinstance(n, bool) and n > 0 and (n & (n - 1)) == 0


def _check_x(x, block_size: int, min_block: int = 1):
    check_tensor("x", x, dtypes=_FLOAT_DTYPES)
    require(x.dim() >= 1, f"x must have at least 1 dim, got shape {tuple(x.shape)}")
    require(_is_pow2(block_size) and block_size >= min_block,
            f"block_size must be a power of two >= {min_block}, got {block_size!r}")
    require(x.shape[-1] % block_size == 0,
            f"the last dim of x ({x.shape[-1]}, shape {tuple(x.shape)}) must be a multiple of block_size={block_size}")


def _triton():
    from lowbit.ops.act_quant import triton as _tr

    return _tr


# --------------------------------------------------------------------------------------------- act_quant
def _act_quant_impl(x: torch.Tensor, block_size: int, scale_fmt: Optional[str], e8m0_scale: bool):
    if use_triton(x):
        return _triton().act_quant(x.contiguous(), block_size, scale_fmt == "ue8m0", e8m0_scale)
    return _ref.act_quant_ref(x, block_size, scale_fmt, e8m0_scale)


def _act_quant_inplace_impl(x: torch.Tensor, block_size: int, scale_fmt: Optional[str]) -> None:
    if use_triton(x):
        if x.is_contiguous():
            _triton().act_quant_inplace(x, block_size, scale_fmt == "ue8m0")
        else:
            tmp = x.contiguous()
            _triton().act_quant_inplace(tmp, block_size, scale_fmt == "ue8m0")
            x.copy_(tmp)
    else:
        x.copy_(_ref.act_quant_dequant_ref(x, block_size, scale_fmt))


@torch.library.custom_op("lowbit::act_quant", mutates_args=())
def _act_quant_op(x: torch.Tensor, block_size: int, scale_fmt: Optional[str], e8m0_scale: bool) -> tuple[torch.Tensor, torch.Tensor]:
    return _act_quant_impl(x, block_size, scale_fmt, e8m0_scale)


@_act_quant_op.register_fake
def _(x, block_size, scale_fmt, e8m0_scale):
    y = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
    s = torch.empty((*x.shape[:-1], x.shape[-1] // block_size), dtype=_E8M0 if e8m0_scale else torch.float32, device=x.device)
    return y, s


@torch.library.custom_op("lowbit::act_quant_", mutates_args=("x",))
def _act_quant_inplace_op(x: torch.Tensor, block_size: int, scale_fmt: Optional[str]) -> None:
    _act_quant_inplace_impl(x, block_size, scale_fmt)


@_act_quant_inplace_op.register_fake
def _(x, block_size, scale_fmt):
    return None


def act_quant(x: torch.Tensor, block_size: int = 128, scale_fmt: Optional[str] = None,
              scale_dtype: torch.dtype = torch.float32, inplace: bool = False):
    """Quantize ``x [..., K]`` to FP8 E4M3 with one scale per ``1 x block_size`` group along K.

    ``s = max(amax, 1e-4) / 448`` per group; with ``scale_fmt="ue8m0"`` it is rounded up to a
    power of two (``2^ceil(log2(amax * f32(1/448)))``, exponent-bit arithmetic). ``y =
    e4m3(clamp(x / s, -448, 448))`` (RNE). Bit-exact with
    ``lowbit.formats.FP8.quantize(x, "group", block_size, scale_fmt)``.

    x: bf16/fp16/fp32 ``[..., K]``, ``K % block_size == 0``, any leading shape.
    Returns ``(y float8_e4m3fn [..., K], s [..., K/block_size])``, ``s`` in ``scale_dtype``
    (fp32, or ``torch.float8_e8m0fnu``, which needs ``scale_fmt="ue8m0"``).

    ``inplace=True`` (FP8 KV caches): **writes** ``x.dtype(f32(y) * s)`` into ``x`` and returns
    ``x`` (no scales). Nothing is mutated otherwise.
    """
    _check_x(x, block_size)
    check_bool("inplace", inplace)
    require(scale_fmt is None or scale_fmt == "ue8m0", f"scale_fmt must be None or 'ue8m0', got {scale_fmt!r}")
    require(scale_dtype in (torch.float32, _E8M0), f"scale_dtype must be torch.float32 or torch.float8_e8m0fnu, got {scale_dtype}")
    require(scale_dtype != _E8M0 or scale_fmt == "ue8m0",
            "scale_dtype=torch.float8_e8m0fnu needs power-of-two scales: pass scale_fmt='ue8m0'")
    if inplace:
        if torch.compiler.is_compiling():
            torch.ops.lowbit.act_quant_(x, block_size, scale_fmt)
        else:
            _act_quant_inplace_impl(x, block_size, scale_fmt)
        return x
    e8m0 = scale_dtype == _E8M0
    if torch.compiler.is_compiling():
        return torch.ops.lowbit.act_quant(x, block_size, scale_fmt, e8m0)
    return _act_quant_impl(x, block_size, scale_fmt, e8m0)


# ----------------------------------------------------------------------------------------- fp4_act_quant
def _fp4_act_quant_impl(x: torch.Tensor, block_size: int, scale_fmt: str):
    if use_triton(x):
        return _triton().fp4_act_quant(x.contiguous(), block_size, scale_fmt == "e4m3")
    return _ref.fp4_act_quant_ref(x, block_size, scale_fmt)


def _fp4_act_quant_inplace_impl(x: torch.Tensor, block_size: int, scale_fmt: str) -> None:
    if use_triton(x):
        tmp = x if x.is_contiguous() else x.contiguous()
        _triton().fp4_act_quant_inplace(tmp, block_size, scale_fmt == "e4m3")
        if tmp is not x:
            x.copy_(tmp)
    else:
        x.copy_(_ref.fp4_act_quant_dequant_ref(x, block_size, scale_fmt))


@torch.library.custom_op("lowbit::fp4_act_quant", mutates_args=())
def _fp4_act_quant_op(x: torch.Tensor, block_size: int, scale_fmt: str) -> tuple[torch.Tensor, torch.Tensor]:
    return _fp4_act_quant_impl(x, block_size, scale_fmt)


@_fp4_act_quant_op.register_fake
def _(x, block_size, scale_fmt):
    q = torch.empty((*x.shape[:-1], x.shape[-1] // 2), dtype=torch.uint8, device=x.device)
    sd = torch.float8_e4m3fn if scale_fmt == "e4m3" else _E8M0
    s = torch.empty((*x.shape[:-1], x.shape[-1] // block_size), dtype=sd, device=x.device)
    return q, s


@torch.library.custom_op("lowbit::fp4_act_quant_", mutates_args=("x",))
def _fp4_act_quant_inplace_op(x: torch.Tensor, block_size: int, scale_fmt: str) -> None:
    _fp4_act_quant_inplace_impl(x, block_size, scale_fmt)


@_fp4_act_quant_inplace_op.register_fake
def _(x, block_size, scale_fmt):
    return None


def fp4_act_quant(x: torch.Tensor, block_size: int = 32, scale_fmt: str = "ue8m0", inplace: bool = False):
    """Quantize ``x [..., K]`` to packed E2M1 with one scale per ``block_size`` along K.

    ``scale_fmt="ue8m0"`` (MX-style, default ``block_size=32``): ``amax = max(amax, 6 * 2^-126)``,
    ``s = 2^ceil(log2(amax * f32(1/6)))`` (never saturates). ``scale_fmt="e4m3"`` (NVFP4-style
    without a global scale, use ``block_size=16``): ``s = e4m3(clamp(amax / 6, 2^-9, 448))`` — the
    2^-9 floor (smallest E4M3 subnormal) keeps an all-zero block from dividing by zero.
    Codes: ``E2M1(clamp(x / s, -6, 6))`` (RNE, fp32 division).

    Returns ``(packed uint8 [..., K/2], s [..., K/block_size])``: element 2i in the LOW nibble of
    byte i; ``s`` is ``torch.float8_e8m0fnu`` (``"ue8m0"``; ``.view(torch.uint8)`` gives the
    exponent bytes) or ``torch.float8_e4m3fn`` (``"e4m3"``).

    ``inplace=True``: **writes** the quantize-dequantized values ``x.dtype(e2m1(code) * s)`` into
    ``x`` and returns ``x``. Nothing is mutated otherwise.
    """
    _check_x(x, block_size, min_block=2)
    check_bool("inplace", inplace)
    require(isinstance(scale_fmt, str) and scale_fmt in ("ue8m0", "e4m3"),
            f"scale_fmt must be 'ue8m0' or 'e4m3', got {scale_fmt!r}")
    if inplace:
        if torch.compiler.is_compiling():
            torch.ops.lowbit.fp4_act_quant_(x, block_size, scale_fmt)
        else:
            _fp4_act_quant_inplace_impl(x, block_size, scale_fmt)
        return x
    if torch.compiler.is_compiling():
        return torch.ops.lowbit.fp4_act_quant(x, block_size, scale_fmt)
    return _fp4_act_quant_impl(x, block_size, scale_fmt)


# ---------------------------------------------------------------------------------------- weight_dequant
def _weight_dequant_impl(w: torch.Tensor, s: torch.Tensor, block_size: int) -> torch.Tensor:
    if use_triton(w, s):
        return _triton().weight_dequant(w.contiguous(), s.contiguous(), block_size, torch.bfloat16)
    return _ref.weight_dequant_ref(w, s, block_size, torch.bfloat16)


@torch.library.custom_op("lowbit::weight_dequant", mutates_args=())
def _weight_dequant_op(w: torch.Tensor, s: torch.Tensor, block_size: int) -> torch.Tensor:
    return _weight_dequant_impl(w, s, block_size)


@_weight_dequant_op.register_fake
def _(w, s, block_size):
    return torch.empty(w.shape, dtype=torch.bfloat16, device=w.device)


def weight_dequant(w: torch.Tensor, s: torch.Tensor, block_size: int = 128) -> torch.Tensor:
    """Dequantize a block-scaled FP8 weight: ``out[n, k] = f32(w[n, k]) * s[n // bs, k // bs]`` -> bf16.

    w: float8_e4m3fn ``[N, K]``; s: fp32 (or float8_e8m0fnu) ``[ceil(N/bs), ceil(K/bs)]``.
    Returns a new bf16 ``[N, K]``.
    """
    check_tensor("w", w, dtypes=(torch.float8_e4m3fn,), ndim=2)
    check_tensor("s", s, dtypes=(torch.float32, _E8M0), ndim=2)
    require(_is_pow2(block_size), f"block_size must be a power of two, got {block_size!r}")
    n, k = w.shape
    want = (-(-n // block_size), -(-k // block_size))
    require(tuple(s.shape) == want, f"s has shape {tuple(s.shape)}, expected {want} for w {tuple(w.shape)} and block_size={block_size}")
    require(w.device == s.device, f"w is on {w.device} but s is on {s.device}")
    if torch.compiler.is_compiling():
        return torch.ops.lowbit.weight_dequant(w, s, block_size)
    return _weight_dequant_impl(w, s, block_size)

