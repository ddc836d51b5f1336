"""Int32 arrival counters of the one-launch split-K reductions (the FP4 and FP8 wgmma GEMVs), one
buffer per (device, stream).

The last CTA of a row tile to arrive reduces its partials and resets its counter, so a buffer is all
zeros between launches and one buffer serves every such kernel launched on one stream (launches on a
stream run one after another). Launches on two streams of a device get two buffers, so they may run
concurrently: sharing one would mix their arrival counts and reduce partials of the wrong launch.

Buffers are grow-only and never freed:

* When a launch needs more tiles than its stream's buffer holds, a larger one replaces it and the
  old one is kept alive (a CUDA graph captured with it still writes into it on every replay, so its
  memory must never go to another tensor).
* A buffer made inside a CUDA-graph capture comes from the graph's memory pool and stays the stream's
  buffer after the capture (graphs replay the launches that the capture recorded, on that buffer).
  Its zeroing is recorded in the graph, not run: until a launch outside any capture zeroes it (the
  first one on that stream does, stream-ordered: no host synchronization), every later launch
  captured on that stream records a zeroing of its own counters before it (a memset node of
  4 bytes a row tile), so each graph and each eager launch starts from zeros. One eager split
  launch on the capture stream before capturing (a warm-up there, as vLLM does) makes the buffer
  outside any graph and leaves the graphs without those memsets.

Creation, growth and that first zeroing hold a lock, so threads calling at once neither lose a
buffer nor free one a kernel still uses.

Not covered: one graph replayed on two streams at once, or a graph replayed on one stream while
eager launches run on the stream it was captured on, share a buffer (as they share every other
buffer of the graph).
"""
from __future__ import annotations

import threading

import torch

__all__ = ["arrival_counters", "stream_key"]

_MAX_TILES = 8192  # counters made at once: N up to 512k rows at 64 a tile


class _Counters:
    """A stream's buffer, and whether its zeros are only recorded in a graph so far."""

    __slots__ = ("buf", "unset")

    def __init__(self, buf: torch.Tensor, unset: bool):
        self.buf = buf
        self.unset = unset


#: stream_key -> _Counters
_COUNTERS: dict = {}
#: buffers replaced by larger ones, kept for the graphs captured with them
_RETIRED: list = []
_LOCK = threading.Lock()


def stream_key(device: torch.device) -> tuple:
    """(device type, device index, id of the device's current stream; 0 off CUDA): whose buffer a
    launch uses."""
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return device.type, index, torch.cuda.current_stream(index).stream_id
    return device.type, device.index, 0


def _zeros(device: torch.device, n: int) -> torch.Tensor:
    return torch.zeros(n, dtype=torch.int32, device=device)


def _capturing(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def arrival_counters(device: torch.device, n_tiles: int, who: str = "split-K launch") -> torch.Tensor:
    """Zeroed int32 counters for at least ``n_tiles`` row tiles, the current stream's of ``device``
    (made or grown on the way, also inside a CUDA-graph capture). ``who`` names the launching
    kernel (informational)."""
    key = stream_key(device)
    entry = _COUNTERS.get(key)
    if entry is not None and not entry.unset and entry.buf.numel() >= n_tiles:
        return entry.buf  # the common path: no lock
    capturing = _capturing(device)
    with _LOCK:
        entry = _COUNTERS.get(key)
        if entry is None or entry.buf.numel() < n_tiles:
            if entry is not None:
                _RETIRED.append(entry.buf)
            # in a capture: allocated from the graph's pool, zeroed by the graph
            entry = _COUNTERS[key] = _Counters(_zeros(device, max(n_tiles, _MAX_TILES)), capturing)
        elif entry.unset:
            if capturing:
                entry.buf[:n_tiles].zero_()  # recorded into this capture: the launch's own counters
            else:
                entry.buf.zero_()  # run now, stream-ordered: zero for good
                entry.unset = False
    return entry.buf
