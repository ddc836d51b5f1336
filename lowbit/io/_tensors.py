"""Lookup helpers for state dicts: every problem is a ``ValueError`` naming the tensor."""
from __future__ import annotations

from typing import Iterable, Mapping

import torch

from lowbit._validate import require

UE8M0_NAN = 0xFF
_POW2_M127_BITS = 0x00400000  # fp32 bit pattern of 2^-127 (a subnormal), UE8M0 byte 0


def name_of(prefix: str, suffix: str) -> str:
    """``"<prefix>.<suffix>"`` (just ``suffix`` for an empty prefix)."""
    return f"{prefix}.{suffix}" if prefix else suffix


def has(tensors: Mapping[str, torch.Tensor], prefix: str, suffix: str) -> bool:
    return name_of(prefix, suffix) in tensors


def get(
    tensors: Mapping[str, torch.Tensor],
    prefix: str,
    suffix: str,
    *,
    dtypes: Iterable[torch.dtype] | None = None,
    shape: tuple | None = None,
    ndim: int | None = None,
) -> torch.Tensor:
    """``tensors["<prefix>.<suffix>"]`` checked for presence, dtype, rank and shape."""
    name = name_of(prefix, suffix)
    require(name in tensors, f"checkpoint has no tensor {name!r}")
    t = tensors[name]
    require(isinstance(t, torch.Tensor), f"{name!r} is a {type(t).__name__}, not a tensor")
    if dtypes is not None:
        allowed = tuple(dtypes)
        require(t.dtype in allowed, f"tensor {name!r} has dtype {t.dtype}; expected one of {list(allowed)}")
    if ndim is not None:
        require(t.dim() == ndim, f"tensor {name!r} must have {ndim} dims, got shape {tuple(t.shape)}")
    if shape is not None:
        require(tuple(t.shape) == tuple(shape), f"tensor {name!r} has shape {tuple(t.shape)}, expected {tuple(shape)}")
    return t


def get_scalar(tensors: Mapping[str, torch.Tensor], prefix: str, suffix: str) -> torch.Tensor:
    """An fp32 scalar stored as shape ``()`` or ``(1,)``; returned as stored (not reshaped)."""
    t = get(tensors, prefix, suffix, dtypes=(torch.float32,))
    require(tuple(t.shape) in ((), (1,)), f"tensor {name_of(prefix, suffix)!r} must be an fp32 scalar (shape () or (1,)), got shape {tuple(t.shape)}")
    return t


def pick(tensors: Mapping[str, torch.Tensor], prefix: str, suffixes: Iterable[str]) -> str:
    """The one suffix of ``suffixes`` present under ``prefix`` (ValueError if none or several)."""
    suffixes = tuple(suffixes)
    found = [s for s in suffixes if has(tensors, prefix, s)]
    names = [name_of(prefix, s) for s in suffixes]
    require(len(found) > 0, f"checkpoint has none of the tensors {names}")
    require(len(found) == 1, f"checkpoint has several of the tensors {names}; expected exactly one")
    return found[0]


def pow2_to_ue8m0(x: torch.Tensor, name: str) -> torch.Tensor:
    """Exact UE8M0 bytes of fp32 powers of two (2^-127 .. 2^127, NaN -> 0xFF); else ValueError.

    Unlike :func:`lowbit.formats.ue8m0_round_up` (which maps subnormals to 2^-126), this is the
    exact inverse of :func:`lowbit.formats.ue8m0_decode`, so a decoded scale writes back bit-exact.
    """
    b = x.float().contiguous().view(torch.int32)
    exp = (b >> 23) & 0xFF
    normal_pow2 = (b & 0x807FFFFF) == 0  # sign 0, mantissa 0
    normal_pow2 &= (exp > 0) & (exp < 0xFF)
    smallest = b == _POW2_M127_BITS
    nan = x != x
    ok = normal_pow2 | smallest | nan
    require(bool(ok.all()), f"{name}: UE8M0 can only hold powers of two in [2^-127, 2^127] or NaN; got {x[~ok].flatten()[:4].tolist()}")
    e = torch.where(smallest, torch.zeros_like(exp), exp)
    e = torch.where(nan, torch.full_like(e, UE8M0_NAN), e)
    return e.to(torch.uint8)


#: the float dtypes a stored scale may have; each converts to fp32 exactly (:func:`scale_fp32`)
SCALE_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def scale_fp32(scale: torch.Tensor) -> torch.Tensor:
    """A scale of one of ``SCALE_DTYPES`` as fp32 (exact; the tensor itself when already fp32)."""
    return scale if scale.dtype == torch.float32 else scale.to(torch.float32)


def as_uint8(t: torch.Tensor) -> torch.Tensor:
    """A byte view of a 1-byte tensor (int8, float4_e2m1fn_x2, float8_e8m0fnu...)."""
    return t if t.dtype == torch.uint8 else t.view(torch.uint8)


def from_uint8(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return t if dtype == torch.uint8 else t.contiguous().view(dtype)


def fp16_exact(scale: torch.Tensor, name: str, where: str = "") -> torch.Tensor:
    """``scale`` as fp16 when every value is exactly an fp16 one, else a ValueError naming the
    tensor ``name`` (after ``where``, e.g. the layout, when given): lowbit's INTx keeps fp16 scales."""
    if scale.dtype == torch.float16:
        return scale
    h = scale.to(torch.float16)
    same = h.to(scale.dtype) == scale
    if not bool(same.all()):
        i = tuple(int(x) for x in (~same).nonzero()[0].tolist())
        raise ValueError(f"{where + ': ' if where else ''}tensor {name!r} holds {float(scale[i])!r} at {i}, which fp16 "
                         "cannot hold exactly: lowbit's INTx keeps fp16 scales, so this layer cannot be read bit-exact")
    return h
