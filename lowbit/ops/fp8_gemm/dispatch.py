"""Which kernel serves ``fp8_gemm`` for a call, with which configuration: :data:`RULES`, in order; the
first rule whose M band and conditions hold runs. ``dispatch_table()`` gives them as rows.

| kernel | M | GPU | also needs | configuration |
|---|---|---|---|---|
| ``wgmma_gemv`` | 9-16 | sm_90 | Gluon, aligned | ``wgmma_gemv.pick_config`` |
| ``mma_gemv`` | 1-8 | sm_89+ | aligned | ``mma_gemv.pick_config`` |
| ``wgmma_gemm`` | 512+ | sm_90 | Gluon, aligned | warp-specialized 128 x 128, 4-5 stages |
| ``wgmma_gemm`` | 17-64 | sm_90 | Gluon, aligned, 3/4 SMs <= ceil(N/64) <= SMs; M <= 32 only for a short weight | 64 x 64, up to 8 stages, PDL |
| ``tiled`` | any | any (the interpreter too) | | ``tiled.CONFIGS`` band of M, TMA on sm_90+ |

"aligned": the 16-byte aligned storage the TMA descriptors / int32 views need. The bands are
where each kernel measured fastest on the H200 (docs/gemm.md; what lost is in
docs/design-notes.md). Kernels take their configuration from here and never re-derive it.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple

import torch

from lowbit._backend import interpret_mode, sm_count
from lowbit.ops.fp8_gemm import mma_gemv, tiled, wgmma_gemm, wgmma_gemv

__all__ = ["Problem", "RULES", "Rule", "device_arch", "dispatch_table", "fp8_gemm", "m_band", "problem", "route"]


class Problem(NamedTuple):
    """What the route depends on: the shape, the GPU (``arch`` None: the Triton interpreter) and the
    operands' storage."""

    m: int
    n: int
    k: int
    arch: tuple[int, int] | None
    sms: int
    aligned: bool  # a and b 16-byte aligned (contiguous: the public op makes them so)
    scales_aligned: bool = True  # b_s 16-byte aligned (mma_gemv reads it as int32 words)
    gluon: bool = True  # triton.experimental.gluon imports
    counters: bool = True  # a split launch may run (its arrival counters are made on demand, in a capture too)


class Rule(NamedTuple):
    """One row of the table: ``kernel`` runs at M in [m_min, m_max] (None: no bound) when
    ``accepts`` holds, with ``config(problem)``; ``gpu`` / ``when`` / ``how`` say it in words."""

    kernel: str
    m_min: int
    m_max: int | None
    gpu: str
    when: str
    how: str
    accepts: Callable[[Problem], bool]
    config: Callable[[Problem], Any]


def _sm90(p: Problem) -> bool:
    return p.arch is not None and p.arch[0] == 9 and p.gluon and p.aligned


#: M bands of the async-wgmma kernel with 64 x 64 tiles, where the 64-row weight tiles number
#: between 3/4 of the SMs and the SMs (one program a tile): M = 33..64 always, M = 17..32 only for a
#: short weight (mma_gemv.SHORT_LAUNCH_BYTES; on the long ones it lost to the tiled kernel).
DECODE_BAND = (33, 64)
DECODE_SHORT_BAND = (17, 32)
#: the async-wgmma kernel at prefill sizes
PREFILL_MIN_M = 512


def _decode_band(p: Problem) -> bool:
    if not _sm90(p) or not 3 * p.sms // 4 <= -(-p.n // 64) <= p.sms:
        return False
    if DECODE_BAND[0] <= p.m <= DECODE_BAND[1]:
        return True
    return p.m >= DECODE_SHORT_BAND[0] and mma_gemv.weight_bytes(p.n, p.k, False) <= mma_gemv.SHORT_LAUNCH_BYTES


def _tiled_config(p: Problem) -> tiled.GemmConfig:
    cfg = tiled.pick_config(p.m)
    return cfg._replace(tma=cfg.tma and p.arch is not None and p.arch >= (9, 0) and p.aligned)


RULES = (
    Rule("wgmma_gemv", 9, 16, "sm_90", "Gluon, aligned", "wgmma_gemv.pick_config(N, K, M, SMs)",
         lambda p: _sm90(p) and p.counters,
         lambda p: wgmma_gemv.pick_config(p.n, p.k, p.m, p.sms)),
    Rule("mma_gemv", 1, 8, "sm_89+", "aligned", "mma_gemv.pick_config(N, K, M, fp4=False)",
         lambda p: p.arch is not None and p.arch >= (8, 9) and p.aligned and p.scales_aligned,
         lambda p: mma_gemv.pick_config(p.n, p.k, p.m, fp4=False)),
    Rule("wgmma_gemm", PREFILL_MIN_M, None, "sm_90", "Gluon, aligned",
         "128 x 128, 8 warps, warp-specialized, 5 stages at K >= 16384 else 4, GROUP_M 8",
         _sm90,
         lambda p: wgmma_gemm.WgmmaGemmConfig(128, 128, 8, 5 if p.k >= 16384 else 4, 8, True, False)),
    Rule("wgmma_gemm", DECODE_SHORT_BAND[0], DECODE_BAND[1], "sm_90",
         "Gluon, aligned, 3/4 SMs <= ceil(N/64) <= SMs; M <= 32 only for a weight <= 32 MiB",
         "64 x 64, 4 warps, min(8, K/128) stages (>= 2), no split, PDL",
         _decode_band,
         lambda p: wgmma_gemm.WgmmaGemmConfig(64, 64, 4, max(2, min(8, p.k // 128)), 8, False, True)),
    Rule("tiled", 0, None, "any", "", "tiled.CONFIGS band of M; TMA loads on sm_90+ where aligned",
         lambda p: True, _tiled_config),
)

_LAUNCH = {
    "wgmma_gemv": lambda a, a_s, b, b_s, cfg: wgmma_gemv.fp8_wgmma_gemv(a, a_s, b, b_s, cfg),
    "mma_gemv": lambda a, a_s, b, b_s, cfg: mma_gemv.mma_gemv(a, a_s, b, b_s, False, cfg),
    "wgmma_gemm": lambda a, a_s, b, b_s, cfg: wgmma_gemm.fp8_gemm_wgmma(a, a_s, b, b_s, cfg),
    "tiled": lambda a, a_s, b, b_s, cfg: tiled.fp8_gemm_tiled(a, a_s, b, b_s, cfg),
}


def route(p: Problem) -> tuple[Rule, Any]:
    """(the first rule that takes ``p``, its configuration)."""
    for rule in RULES:
        if rule.m_min <= p.m and (rule.m_max is None or p.m <= rule.m_max) and rule.accepts(p):
            return rule, rule.config(p)
    raise AssertionError("unreachable: the last rule takes every problem")


@functools.lru_cache(maxsize=None)
def _capability(index: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(index)


@functools.lru_cache(maxsize=None)
def _interpreter() -> bool:
    return interpret_mode()  # read once: TRITON_INTERPRET only counts before Triton is imported


def device_arch(dev: torch.device) -> tuple[int, int] | None:
    """The compute capability of a CUDA device (cached), or None where the kernels run under the
    Triton interpreter (CPU tensors, ``TRITON_INTERPRET=1``)."""
    if dev.type != "cuda" or _interpreter():
        return None
    return _capability(dev.index if dev.index is not None else torch.cuda.current_device())


def problem(a: torch.Tensor, a_s: torch.Tensor, b: torch.Tensor, b_s: torch.Tensor) -> Problem:
    """The :class:`Problem` of a call on 2-D contiguous operands."""
    dev = a.device
    arch = device_arch(dev)
    return Problem(a.shape[0], b.shape[0], a.shape[1], arch, sm_count(dev, interpret=132),
                   a.data_ptr() % 16 == 0 and b.data_ptr() % 16 == 0, b_s.data_ptr() % 16 == 0,
                   wgmma_gemv.GLUON_ERROR is None and wgmma_gemm.GLUON_ERROR is None)


def fp8_gemm(a: torch.Tensor, a_s: torch.Tensor, b: torch.Tensor, b_s: torch.Tensor) -> torch.Tensor:
    """Run the routed kernel: a e4m3 [M, K] contiguous, a_s [M, K/128]; b e4m3 [N, K], b_s
    [ceil(N/128), K/128] (contiguous) -> bf16 [M, N]."""
    rule, cfg = route(problem(a, a_s, b, b_s))
    return _LAUNCH[rule.kernel](a, a_s, b, b_s, cfg)


def dispatch_table() -> list[dict]:
    """The rules as rows (op, kernel, M band, GPU, conditions, configuration), in order."""
    return [dict(op="fp8_gemm", kernel=r.kernel, m=m_band(r), gpu=r.gpu, when=r.when, config=r.how) for r in RULES]


def m_band(rule: Rule) -> str:
    """A rule's M band in words: "9-16", "512+", "any"."""
    if rule.m_max is None:
        return "any" if rule.m_min <= 1 else f"{rule.m_min}+"
    return f"{rule.m_min}-{rule.m_max}"
