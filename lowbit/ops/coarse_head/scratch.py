"""Grow-only per-device state of the sync-free kernels (tickets, counters, running bests).

Each of these kernels leaves its state as it found it, so one buffer per device serves every
call. When a call needs more rows than the buffer holds, a larger one replaces it — and the old
one is kept alive: a CUDA graph captured with it still points at its memory, and replaying that
graph must not write into memory the allocator has handed to another tensor.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

#: states replaced by larger ones, kept for the graphs captured with them
_RETIRED: list = []


def device_state(cache: dict, device: torch.device, rows: int, make: Callable[[torch.device, int], Any],
                 size: Callable[[Any], int]) -> Any:
    """``cache[device]`` if it serves ``rows`` rows (``size(state) >= rows``), else a new
    ``make(device, rows)`` stored there (the replaced state is retired, not freed)."""
    state = cache.get(device)
    if state is None or size(state) < rows:
        if state is not None:
            _RETIRED.append(state)
        state = cache[device] = make(device, rows)
    return state
