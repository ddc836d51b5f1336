"""Shared behaviour of the format dataclasses: ``to(device)`` and ``nbytes`` over tensor fields."""
from __future__ import annotations

import dataclasses

import torch


class TensorFormat:
    """Mixin for frozen dataclasses whose fields are tensors plus plain metadata."""

    def _tensor_fields(self) -> dict[str, torch.Tensor]:
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if isinstance(getattr(self, f.name), torch.Tensor)
        }

    def to(self, device) -> "TensorFormat":
        """A copy with every tensor moved to ``device`` (metadata unchanged)."""
        moved = {k: v.to(device) for k, v in self._tensor_fields().items()}
        return dataclasses.replace(self, **moved)

    @property
    def device(self) -> torch.device:
        return next(iter(self._tensor_fields().values())).device

    @property
    def nbytes(self) -> int:
        """Bytes held by the tensors (what a kernel streams to read the whole weight)."""
        return sum(t.numel() * t.element_size() for t in self._tensor_fields().values())


def require_int(name: str, value) -> int:
    """``value`` must be a Python int (bools rejected: they are ints); ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    return value


def require_finite(name: str, t: torch.Tensor) -> None:
    """ValueError naming the first (row, col) of a NaN / inf in ``t`` (one host synchronization)."""
    bad = ~torch.isfinite(t)
    if bool(bad.any()):
        where = tuple(int(i) for i in bad.nonzero()[0].tolist())
        raise ValueError(f"{name} has a non-finite value ({t[where].item()}) at {where}: "
                         f"quantizers accept finite input only")
