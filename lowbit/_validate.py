"""Small validation helpers: every check raises ``ValueError`` naming the offending value.

Never ``assert`` (``python -O`` strips it). Run before any kernel launch.
"""
from __future__ import annotations

from typing import Iterable

import torch


def require(cond: bool, message: str) -> None:
    if not cond:
        raise ValueError(message)


def check_tensor(
    name: str,
    t,
    *,
    dtypes: Iterable[torch.dtype] | torch.dtype | None = None,
    ndim: int | Iterable[int] | None = None,
) -> torch.Tensor:
    """Check that ``t`` is a tensor with an allowed dtype and rank; return it."""
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if dtypes is not None:
        allowed = (dtypes,) if isinstance(dtypes, torch.dtype) else tuple(dtypes)
        if t.dtype not in allowed:
            raise ValueError(f"{name} has dtype {t.dtype}; expected one of {list(allowed)}")
    if ndim is not None:
        allowed_nd = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if t.dim() not in allowed_nd:
            raise ValueError(f"{name} must have {' or '.join(map(str, allowed_nd))} dims, got shape {tuple(t.shape)}")
    return t


def check_int(name: str, value, *, minimum: int | None = None) -> int:
    """``value`` must be a Python int (not a bool, float or tensor), ``>= minimum`` if given."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def check_bool(name: str, value) -> bool:
    """``value`` must be a Python bool (``inplace="no"`` must not mean True)."""
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be a bool, got {type(value).__name__} {value!r}")
    return value


def overlaps_itself(t: torch.Tensor) -> bool:
    """Whether two elements of ``t`` share memory (an expanded / stride-0 view, or strides that
    make rows overlap), decided from shape and strides alone (no sync). Dims of size <= 1 never
    overlap; otherwise, in increasing stride order, each stride must step past the whole extent
    of the smaller-stride dims."""
    dims = sorted((abs(st), sz) for st, sz in zip(t.stride(), t.shape) if sz > 1)
    extent = 1  # 1 + the largest offset reachable with the dims seen so far
    for st, sz in dims:
        if st < extent:
            return True
        extent += st * (sz - 1)
    return False


def check_same_device(**tensors) -> torch.device:
    """All non-None tensors must share one device; return it."""
    named = {k: v for k, v in tensors.items() if isinstance(v, torch.Tensor)}
    devices = {str(v.device) for v in named.values()}
    if len(devices) > 1:
        desc = ", ".join(f"{k} on {v.device}" for k, v in named.items())
        raise ValueError(f"tensors must be on one device: {desc}")
    return next(iter(named.values())).device
