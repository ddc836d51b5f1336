"""Shared pieces of the draft-head benchmark scripts (``bench_retiled.py``, ``bench_coarse_ab.py``,
``bench_certified_real.py``): the synthetic head they time, and the JSON record log they print
and save."""
from __future__ import annotations

import json

#: one rank of a ~248k vocabulary (the issue's first benchmark shape)
N, K = 124160, 5120


def random_head(n: int = N, k: int = K, seed: int = 0):
    """bf16 [n, k] weight with N(0, 0.02) rows on the GPU (the same draw in every script)."""
    import torch

    torch.manual_seed(seed)
    return torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02


class RecordLog:
    """``log(rec)``: print one JSON record as it is measured (a killed run keeps what it printed)
    and keep it; ``save(path)`` writes all of them (nothing when path is None)."""

    def __init__(self):
        self.rows: list[dict] = []

    def __call__(self, rec: dict) -> None:
        self.rows.append(rec)
        print(json.dumps(rec), flush=True)

    def save(self, path: str | None) -> None:
        if path:
            with open(path, "w") as f:
                json.dump(self.rows, f, indent=1)
