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
