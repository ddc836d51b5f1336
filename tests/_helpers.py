"""Shared test helpers: NaN-poisoned outputs, relative error against fp64 references, CUDA-graph capture."""
from __future__ import annotations

import torch


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """``||out - ref|| / ||ref||`` in fp64 (0 when both are zero)."""
    out64, ref64 = out.double().cpu(), ref.double().cpu()
    denom = ref64.norm().item()
    diff = (out64 - ref64).norm().item()
    return diff / denom if denom > 0 else diff


def poisoned(shape, dtype=torch.float32, device="cpu") -> torch.Tensor:
    """An uninitialised-looking output buffer filled with NaN, so an unwritten element fails."""
    return torch.full(shape, float("nan"), dtype=dtype, device=device)


def capture(fn):
    """``(graph, result)``: ``fn()`` captured into a fresh CUDA graph after a synchronize, and what it
    returned inside the capture (its output buffers, refilled by each ``graph.replay()``). Warm ``fn``
    up first: a kernel compiled inside the capture fails it."""
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return graph, out
