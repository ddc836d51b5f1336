"""Shared pieces of the draft-head benchmark scripts (``bench_retiled.py``, ``bench_coarse_ab.py``,
``bench_certified_real.py``, ``profile_certified_stages.py``): the synthetic head they time, the
cold-L2 graph-replay timer over a list of inputs, and the JSON record log they print and save."""
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


def cold_graph_us(fn, xs, reps: int = 3) -> float:
    """Median GPU µs of one CUDA-graph replay of ``fn(static)`` over the inputs ``xs`` (same shape):
    per input, the input is copied into the captured buffer and L2 flushed outside the timed
    region, then one replay is timed by CUDA events. Data-dependent work (certified sets,
    fallbacks) is what each input makes it."""
    import torch

    flush = cold_graph_us.__dict__.get("flush")
    if flush is None:
        flush = cold_graph_us.flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")  # > L2
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
    static = xs[0].clone()
    fn(static)  # warm: every kernel compiled before the capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn(static)
    times = []
    for _ in range(reps):
        for x in xs:
            static.copy_(x)
            flush.zero_()
            ev[0].record()
            g.replay()
            ev[1].record()
            torch.cuda.synchronize()
            times.append(ev[0].elapsed_time(ev[1]) * 1e3)
    return sorted(times)[len(times) // 2]
