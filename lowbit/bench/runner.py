"""Run the benchmark registry: measure the ceilings, build a BenchContext, run every op.

:func:`run` is what ``lowbit bench`` calls. The order matters: the device's copy bandwidth,
bf16 matmul peak and FP8 peak are measured first, in the same process as the ops, so "% of floor"
is relative to this card today (BENCHMARKS.md: measure a kernel and its baselines in the same run).
A benchmark that raises is reported as a failure and the run goes on with the next op; one that
raises :class:`~lowbit.bench.registry.Skip` is reported as skipped, with its reason.
"""
from __future__ import annotations

import dataclasses
import time
import traceback
from typing import Callable

from lowbit.bench.registry import BenchContext, BenchSpec, Result, Skip, discover


class NoGPU(RuntimeError):
    """Raised when benchmarks are asked for on a machine without a CUDA device."""


def available_ops() -> dict[str, BenchSpec]:
    """Every registered benchmark (importing each ``lowbit/bench/*.py`` module)."""
    return discover()


def select_ops(names: list[str] | None) -> list[BenchSpec]:
    """The specs for ``names`` (all when None/empty); ValueError naming unknown ops."""
    specs = available_ops()
    if not names:
        return [specs[k] for k in sorted(specs)]
    unknown = [n for n in names if n not in specs]
    if unknown:
        known = ", ".join(sorted(specs)) or "(none registered)"
        raise ValueError(f"unknown benchmark op {', '.join(map(repr, unknown))}; known ops: {known}")
    return [specs[n] for n in names]


def require_gpu() -> str:
    """The CUDA device name, or :class:`NoGPU` with a plain explanation."""
    import torch

    if not torch.cuda.is_available():
        raise NoGPU("no CUDA GPU is visible: `lowbit bench` times GPU kernels against cuBLAS and needs one "
                    "(the CPU paths are references, not something to benchmark)")
    return torch.cuda.get_device_name(0)


def versions() -> dict[str, str]:
    """The versions a record depends on: lowbit, torch (and its CUDA), Triton."""
    import torch

    import lowbit

    out = {"lowbit": lowbit.__version__, "torch": torch.__version__, "cuda": str(torch.version.cuda)}
    try:
        import triton

        out["triton"] = triton.__version__
    except ImportError:
        out["triton"] = "not installed"
    return out


def measure_context(quick: bool = False, log: Callable[[str], None] = print) -> BenchContext:
    """Measure copy bandwidth, bf16 and FP8 matmul peaks on the current GPU."""
    from lowbit.bench import timing

    n = 4096 if quick else 8192
    copy_bytes = 2**29 if quick else 2**31
    log("measuring device-to-device copy bandwidth ...")
    copy = timing.copy_bandwidth_gbps(copy_bytes)
    log(f"  copy {copy:.0f} GB/s; bf16 matmul {n}^3 ...")
    bf16 = timing.bf16_matmul_tflops(n)
    log(f"  bf16 {bf16:.0f} TFLOP/s; FP8 _scaled_mm {n}^3 ...")
    fp8 = timing.fp8_matmul_tflops(n)
    log(f"  fp8 {fp8:.0f} TFLOP/s" if fp8 else "  fp8: not available on this device / torch")
    return BenchContext(copy_gbps=copy, bf16_tflops=bf16, fp8_tflops=fp8, quick=quick, device="cuda")


@dataclasses.dataclass
class RunOutcome:
    ctx: BenchContext
    results: list[Result]
    failures: dict[str, str]  # op name -> error text
    skipped: dict[str, str] = dataclasses.field(default_factory=dict)  # op name -> the reason
    # op name -> wall seconds it ran (compiles included), for planning runs under a time limit
    seconds: dict[str, float] = dataclasses.field(default_factory=dict)


def run_specs(specs: list[BenchSpec], ctx: BenchContext, on_op: Callable[[str], None] | None = None,
              on_done: Callable[[str, int], None] | None = None,
              checkpoint: Callable[[RunOutcome, list[str]], None] | None = None) -> RunOutcome:
    """Run each spec with ``ctx``; collect its rows; record (not raise) a benchmark's failure or skip.
    ``checkpoint(outcome so far, names still to run)`` follows every spec, so a run stopped part way
    (a time limit, Ctrl-C) can keep what finished."""
    results: list[Result] = []
    failures: dict[str, str] = {}
    skipped: dict[str, str] = {}
    seconds: dict[str, float] = {}
    for i, spec in enumerate(specs):
        if on_op is not None:
            on_op(spec.name)
        t0 = time.perf_counter()
        try:
            rows = list(spec.fn(ctx))
        except Skip as e:
            skipped[spec.name] = str(e)
            rows = []
        except Exception as e:  # a broken benchmark must not hide the others' numbers
            failures[spec.name] = f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}"
            rows = []
        for r in rows:
            if not isinstance(r, Result):
                failures[spec.name] = f"returned a {type(r).__name__}, not a Result"
                break
        else:
            results.extend(rows)
        seconds[spec.name] = round(time.perf_counter() - t0, 1)
        if on_done is not None:
            on_done(spec.name, len(rows))
        if checkpoint is not None:
            checkpoint(RunOutcome(ctx, list(results), dict(failures), dict(skipped), dict(seconds)),
                       [s.name for s in specs[i + 1:]])
    return RunOutcome(ctx, results, failures, skipped, seconds)
