"""The benchmark registry.

An op's benchmark lives in ``lowbit/bench/<op>.py`` and registers itself::

    from lowbit.bench.registry import BenchContext, Result, register

    @register("gathered_bias", description="NVFP4 gathered bias, V=131072")
    def run(ctx: BenchContext) -> list[Result]:
        ...  # time lowbit and each baseline on the same inputs, same run
        return [Result(op="gathered_bias", case="K1024 B16 T32", impl="lowbit", us=..., bytes=..., flops=...),
                Result(op="gathered_bias", case="K1024 B16 T32", impl="unfused torch", us=..., ...)]

Rules: the lowbit implementation's ``impl`` is ``"lowbit"`` (or starts with ``"lowbit"``, e.g.
``"lowbit int2"``); every other impl is a baseline measured in the same run. ``bytes`` counts each
input read once and each output written once; ``flops`` the arithmetic (2 per multiply-add).
``ctx.quick`` asks for a few representative shapes only. A benchmark that cannot run here for a
reason the user can fix (a data file it needs is absent) raises :class:`Skip` with that reason.
"""
from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from typing import Callable

_REGISTRY: dict[str, "BenchSpec"] = {}


class Skip(Exception):
    """Raised by a benchmark that cannot run here; the message says why and how to fix it. The run
    reports it and goes on (not a failure)."""


@dataclasses.dataclass
class BenchContext:
    """Ceilings measured at the start of the run, plus options."""

    copy_gbps: float  # device-to-device copy, (read + write) bytes / s / 1e9
    bf16_tflops: float  # 8192^3 bf16 matmul
    fp8_tflops: float | None = None  # 8192^3 torch._scaled_mm per-tensor FP8, if available
    quick: bool = False
    device: str = "cuda"


@dataclasses.dataclass
class Result:
    op: str
    case: str
    impl: str
    us: float
    bytes: int = 0
    flops: int = 0
    extra: dict = dataclasses.field(default_factory=dict)

    def floor_us(self, ctx: BenchContext, peak_tflops: float | None = None) -> float:
        """max(bytes / copy bandwidth, flops / peak) in µs."""
        t_bytes = self.bytes / (ctx.copy_gbps * 1e3) if self.bytes else 0.0
        peak = peak_tflops or ctx.bf16_tflops
        t_flops = self.flops / (peak * 1e6) if self.flops else 0.0
        return max(t_bytes, t_flops)


@dataclasses.dataclass
class BenchSpec:
    name: str
    fn: Callable[[BenchContext], list[Result]]
    description: str = ""


def register(name: str, description: str = ""):
    def deco(fn):
        _REGISTRY[name] = BenchSpec(name, fn, description)
        return fn

    return deco


def discover() -> dict[str, BenchSpec]:
    """Import every module of ``lowbit.bench`` so their ``@register`` calls run."""
    import lowbit.bench as pkg

    for mod in pkgutil.iter_modules(pkg.__path__):
        if mod.name not in ("registry", "timing", "report", "runner"):
            importlib.import_module(f"lowbit.bench.{mod.name}")
    return dict(_REGISTRY)
