"""Byte-level comparison of state dicts for the io tests."""
from __future__ import annotations

import torch


def raw(t: torch.Tensor) -> bytes:
    return t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes() if t.dim() else t.detach().cpu().reshape(1).view(torch.uint8).numpy().tobytes()


def assert_same_bytes(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    for k in a:
        assert a[k].dtype == b[k].dtype, k
        assert tuple(a[k].shape) == tuple(b[k].shape), k
        assert raw(a[k]) == raw(b[k]), k
