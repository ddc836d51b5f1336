"""Measuring tools for the GPU benchmarks (import only on a CUDA machine).

* :func:`time_us` — median µs of ``fn`` via ``triton.testing.do_bench`` (L2 flushed between runs),
  or CUDA-graph replay (``graph=True``) for kernels under ~20 µs where launch overhead dominates.
* :func:`rotating` — cycle through several input copies whose total exceeds L2 (60 MB on H200).
* :func:`copy_bandwidth_gbps`, :func:`bf16_matmul_tflops`, :func:`fp8_matmul_tflops` — ceilings.
* :func:`interleaved_medians` — several variants timed over rounds of alternating order, medians.
* :func:`cold_graph_us` — one CUDA-graph replay per input of a list, L2 flushed before each, for
  calls whose work depends on the data (the certified draft head's sets and fallbacks).
"""
from __future__ import annotations

import itertools
import statistics
from typing import Callable

import torch

L2_BYTES = 60 * 2**20


def time_us(fn: Callable[[], object], *, graph: bool = False, rep: int = 100) -> float:
    """Median time of one ``fn()`` call in microseconds."""
    import triton.testing

    if graph:
        # Triton runs fn on a stream of its own that does not wait for the current one: without
        # this, fn may read inputs an earlier eager launch is still writing (garbage indices)
        torch.cuda.synchronize()
        ms = triton.testing.do_bench_cudagraph(fn, rep=rep, return_mode="median")
    else:
        ms = triton.testing.do_bench(fn, rep=rep, return_mode="median")
    return ms * 1e3


def interleaved_medians(variants: list, measure: Callable[[object], dict], rounds: int) -> dict:
    """Time every variant ``rounds`` times, in the given order on even rounds and reversed on odd
    ones, and return ``{variant: record}`` with each numeric field the median over its rounds
    (other fields from the first round). ``measure(variant)`` returns a dict of timings; if it
    raises in any round, that variant's record is ``{"error": "Type: message"}``. Why: a path
    timed right after another can measure ~1 us slower at the same code, so a fixed order biases
    differences of that size; alternating spreads the drift over every variant. Works without a
    GPU (``measure`` does the timing)."""
    if rounds < 1:
        raise ValueError(f"interleaved_medians needs rounds >= 1, got {rounds}")
    samples: dict = {v: [] for v in variants}
    errors: dict = {}
    for r in range(rounds):
        for v in (variants if r % 2 == 0 else variants[::-1]):
            if v in errors:
                continue
            try:
                samples[v].append(measure(v))
            except Exception as e:  # noqa: BLE001 - reported in the variant's record
                errors[v] = {"error": f"{type(e).__name__}: {str(e)[:400]}"}
    out = {}
    for v in variants:
        if v in errors:
            out[v] = errors[v]
            continue
        recs = samples[v]
        out[v] = {key: (statistics.median(r[key] for r in recs) if isinstance(val, (int, float))
                        and not isinstance(val, bool) else val) for key, val in recs[0].items()}
    return out


def launch_us(device="cuda") -> float:
    """The launch floor: one tiny kernel (an in-place add on one element) under CUDA-graph replay,
    the same timer as the decode benchmarks. No kernel of a decode step takes less."""
    one = torch.zeros(1, device=device)
    return time_us(lambda: one.add_(1.0), graph=True)


def rotating(make: Callable[[], tuple], bytes_per_copy: int, min_total: int = 4 * L2_BYTES, max_copies: int = 16):
    """Build enough copies of the inputs ``make()`` returns to exceed ``min_total`` bytes;
    return an infinite iterator over them (use ``next(it)`` inside the timed function)."""
    copies = max(1, min(max_copies, -(-min_total // max(bytes_per_copy, 1))))
    return itertools.cycle([make() for _ in range(copies)])


def copy_bandwidth_gbps(nbytes: int = 2 * 2**30) -> float:
    """Device-to-device copy bandwidth, counting bytes read + written."""
    src = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda").uniform_()
    dst = torch.empty_like(src)
    us = time_us(lambda: dst.copy_(src))
    return 2 * nbytes / (us * 1e3)


def bf16_matmul_tflops(n: int = 8192) -> float:
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    us = time_us(lambda: a @ b)
    return 2 * n**3 / (us * 1e6)


def fp8_matmul_tflops(n: int = 8192) -> float | None:
    try:
        a = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn).t()
        one = torch.ones((), device="cuda")
        us = time_us(lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
    except (RuntimeError, AttributeError):
        return None
    return 2 * n**3 / (us * 1e6)


_FLUSH: list = []


def cold_graph_us(fn: Callable[[torch.Tensor], object], xs: list, reps: int = 3) -> float:
    """Median GPU µs of one CUDA-graph replay of ``fn(static)`` over the inputs ``xs`` (one shape):
    per input, the input is copied into the captured buffer and L2 flushed outside the timed
    region, then one replay is timed by CUDA events, so data-dependent work is what each input
    makes it. The flush reads 256 MB (a write would leave dirty lines whose write-back the timed
    call pays for)."""
    if not _FLUSH:
        _FLUSH.append(torch.ones(64 * 2**20, dtype=torch.int32, device="cuda"))  # 256 MB > L2
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
    static = xs[0].clone()
    fn(static)  # every kernel compiled before the capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn(static)
    times = []
    for _ in range(reps):
        for x in xs:
            static.copy_(x)
            _FLUSH[0].sum()
            ev[0].record()
            g.replay()
            ev[1].record()
            torch.cuda.synchronize()
            times.append(ev[0].elapsed_time(ev[1]) * 1e3)
    return statistics.median(times)
