"""Per-device int32 arrival counters of the one-launch split-K reductions (the FP4 and FP8 wgmma
GEMVs): the last CTA of a row tile to arrive reduces its partials and resets its counter, so the
buffer is all zeros between launches and one buffer serves every such kernel of a device.

Launches that use it must not run concurrently on different streams (they would share counters).
The buffer is made outside any CUDA-graph capture (a buffer from a capture's pool would be freed
with the graph): a capture that finds none raises, and the dispatchers check
:func:`counters_ready` first."""
from __future__ import annotations

import torch

__all__ = ["arrival_counters", "counters_ready"]

_COUNTERS: dict = {}
_MAX_TILES = 8192  # counters made at once: N up to 512k rows at 64 a tile


def arrival_counters(device: torch.device, n_tiles: int, who: str) -> torch.Tensor:
    """Zeroed int32 counters for at least ``n_tiles`` row tiles on ``device`` (``who`` names the
    kernel in the error raised inside a capture that finds none)."""
    key = (device.type, device.index)
    c = _COUNTERS.get(key)
    if c is None or c.numel() < n_tiles:
        if torch.cuda.is_current_stream_capturing():
            raise RuntimeError(f"{who}: run one split launch before CUDA-graph capture (it allocates the "
                               "per-device arrival counters)")
        c = torch.zeros(max(n_tiles, _MAX_TILES), dtype=torch.int32, device=device)
        _COUNTERS[key] = c
    return c


def counters_ready(device: torch.device) -> bool:
    """Whether a launch may need no allocation of counters: outside a CUDA-graph capture, or inside
    one when the device's counters exist (made on first use, big enough for N up to 64 x
    ``_MAX_TILES`` rows)."""
    return not torch.cuda.is_current_stream_capturing() or (device.type, device.index) in _COUNTERS
