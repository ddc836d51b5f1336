"""Grow-only state of the sync-free kernels (tickets, counters, running bests), one per (device,
stream).

Each of these kernels leaves its state as it found it, so one buffer per stream serves every call
on it; calls on two streams of one device get two buffers, so they may run concurrently (sharing
one would mix their arrival counts). When a call needs more rows than the buffer holds, a larger one
replaces it -- and the old one is kept alive: a CUDA graph captured with it still points at its
memory, and replaying that graph must not write into memory the allocator has handed to another
tensor. Creation and replacement hold a lock, so threads calling at once neither lose a state
nor free one a kernel still uses.

A state made inside a CUDA-graph capture is zeroed only when that graph replays (its zero fill is
part of the graph), so it is kept for the graph but not cached: an eager call on the same stream
before a replay would otherwise read uninitialized counters. The next eager call makes its own.
"""
from __future__ import annotations

import threading
from typing import Any, Callable

import torch

#: states replaced by larger ones, kept for the graphs captured with them
_RETIRED: list = []
_LOCK = threading.Lock()


def stream_key(device: torch.device) -> tuple:
    """(device, the id of its current stream; 0 off CUDA): the key of a call's state."""
    if device.type == "cuda":
        return device, torch.cuda.current_stream(device).stream_id
    return device, 0


def capturing(device: torch.device) -> bool:
    """Whether the current stream of ``device`` is capturing a CUDA graph."""
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def device_state(cache: dict, device: torch.device, rows: int, make: Callable[[torch.device, int], Any],
                 size: Callable[[Any], int]) -> Any:
    """``cache[stream_key(device)]`` if it serves ``rows`` rows (``size(state) >= rows``), else a new
    ``make(device, rows)`` stored there (the replaced state is retired, not freed)."""
    key = stream_key(device)
    state = cache.get(key)
    if state is not None and size(state) >= rows:
        return state
    if capturing(device):
        state = make(device, rows)
        with _LOCK:
            _RETIRED.append(state)  # the graph's own: alive as long as the process
        return state
    with _LOCK:
        state = cache.get(key)
        if state is None or size(state) < rows:
            if state is not None:
                _RETIRED.append(state)
            state = cache[key] = make(device, rows)
    return state


__all__ = ["capturing", "device_state", "stream_key"]
