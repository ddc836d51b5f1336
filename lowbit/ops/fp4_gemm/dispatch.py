"""Which kernel serves ``fp4_gemm`` for a call, with which configuration: :data:`RULES`, in order; the
first rule whose M band and conditions hold runs. ``dispatch_table()`` gives them as rows.

| kernel | M | GPU | also needs | configuration |
|---|---|---|---|---|
| ``wgmma_gemv`` | 1-16 | sm_90 | Gluon, aligned, K % 512 == 0 | ``wgmma_gemv.pick_config`` |
| ``mma_gemv`` | 1-16 | sm_89+ | aligned | ``fp8_gemm/mma_gemv.pick_config`` (FP4) |
| ``expand_fp8`` | 512+ | sm_89+ (the interpreter too) | M N K >= 2^35 (2^33 inside CUDA-graph capture) | re-encode to FP8, ``fp8_gemm``'s dispatch, guarded ``tiled`` |
| ``wgmma_gemv_chunks`` | 17-64 | sm_90 | Gluon, aligned, K % 512 == 0 | ``wgmma_gemv`` per 32-row chunk |
| ``tiled`` | any | any (the interpreter too) | | ``tiled.CONFIGS`` band of M |

"aligned": the 16-byte aligned storage the TMA descriptors / int32 views need. The bands are
where each kernel measured fastest on the H200 (docs/gemm.md; what lost is in
docs/design-notes.md). Kernels take their configuration from here and never re-derive it.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import torch

from lowbit._backend import sm_count
from lowbit.ops.fp4_gemm import tiled, wgmma_gemv
from lowbit.ops.fp4_gemm.expand import fp4_weight_to_fp8
from lowbit.ops.fp8_gemm import dispatch as fp8_dispatch
from lowbit.ops.fp8_gemm.dispatch import Rule
from lowbit.ops.fp8_gemm import mma_gemv

__all__ = ["EXPAND_MIN_M", "EXPAND_MIN_MNK", "EXPAND_MIN_MNK_GRAPH", "Problem", "RULES", "Rule", "dispatch_table",
           "fp4_gemm", "fp4_via_fp8", "problem", "route"]

#: From this many activation rows on, where M N K reaches :data:`EXPAND_MIN_MNK` (eager) or
#: :data:`EXPAND_MIN_MNK_GRAPH` (inside CUDA-graph capture), the weight is re-encoded as block-scaled
#: FP8 (``expand.py``), the FP8 GEMM runs on it and the tiled kernel follows as a guarded launch that
#: computes only where the re-encoding was not exact (:func:`fp4_via_fp8`). On the H200 the path's
#: GPU time was 1.7-3.9x below the tiled kernel's from M = 512 on; its three launches cost 250-335 us
#: of host time against 100-110 us, so eagerly it pays only where the tiled kernel runs well over
#: 300 us (docs/gemm.md). A graph replay costs no host time, hence the lower bar under capture.
EXPAND_MIN_M = 512
EXPAND_MIN_MNK = 2**35
EXPAND_MIN_MNK_GRAPH = 2**33
#: the most rows the wgmma GEMV runs as row chunks (each launch reads the weight again)
CHUNK_MAX_M = 64


class Problem(NamedTuple):
    """What the route depends on: the shape, the GPU (``arch`` None: the Triton interpreter) and the
    operands' storage."""

    m: int
    n: int
    k: int
    arch: tuple[int, int] | None
    sms: int
    aligned: bool  # a, b and b_s 16-byte aligned (contiguous: the public op makes them so)
    gluon: bool = True  # triton.experimental.gluon imports
    counters: bool = True  # a split launch may run (its arrival counters are made on demand, in a capture too)
    capturing: bool = False  # inside CUDA-graph capture


def _wgmma_gemv_ok(p: Problem) -> bool:
    return (p.arch is not None and p.arch[0] == 9 and p.gluon and p.aligned and p.k % wgmma_gemv.STAGE_K == 0
            and p.counters)


def _expand_ok(p: Problem) -> bool:
    if p.arch is not None and p.arch < (8, 9):  # FP8 tensor cores from sm_89
        return False
    return p.m * p.n * p.k >= (EXPAND_MIN_MNK_GRAPH if p.capturing else EXPAND_MIN_MNK)


RULES = (
    Rule("wgmma_gemv", 1, 16, "sm_90", "Gluon, aligned, K % 512 == 0", "wgmma_gemv.pick_config(N, K, M, SMs)",
         _wgmma_gemv_ok,
         lambda p: wgmma_gemv.pick_config(p.n, p.k, p.m, p.sms)),
    Rule("mma_gemv", 1, 16, "sm_89+", "aligned", "fp8_gemm.mma_gemv.pick_config(N, K, M, fp4=True)",
         lambda p: p.arch is not None and p.arch >= (8, 9) and p.aligned,
         lambda p: mma_gemv.pick_config(p.n, p.k, p.m, fp4=True)),
    Rule("expand_fp8", EXPAND_MIN_M, None, "sm_89+ (and the interpreter)",
         "M N K >= 2^35 (2^33 inside CUDA-graph capture)",
         "FP8 re-encoding, fp8_gemm's dispatch, then the tiled kernel guarded by the exactness flag",
         _expand_ok, lambda p: None),
    Rule("wgmma_gemv_chunks", 17, CHUNK_MAX_M, "sm_90", "Gluon, aligned, K % 512 == 0",
         "wgmma_gemv over 32-row chunks, pick_config per chunk",
         _wgmma_gemv_ok, lambda p: wgmma_gemv.MAX_M),
    Rule("tiled", 0, None, "any", "", "tiled.CONFIGS band of M (step: four dots or aligned)",
         lambda p: True, lambda p: tiled.pick_config(p.m)),
)


def fp4_via_fp8(a: torch.Tensor, a_s: torch.Tensor, b: torch.Tensor, b_s: torch.Tensor) -> torch.Tensor:
    """The re-encode path: C from the FP8 GEMM on the re-encoded weight, then the tiled kernel as a
    guarded launch over the same C, whose programs return at once unless the re-encoding flagged
    the weight as not exact (a nonzero group more than 14 binades below its block's largest scale,
    or a NaN scale), in which case it overwrites C with the exact result. All on the device: no
    host synchronization, and capturable in a CUDA graph."""
    q, qs, bad = fp4_weight_to_fp8(b, b_s)
    c = fp8_dispatch.fp8_gemm(a, a_s, q, qs)
    return tiled.fp4_gemm_tiled(a, a_s, b, b_s, split_k=1, out=c, guard=bad)


def _wgmma_gemv_chunks(a: torch.Tensor, a_s: torch.Tensor, b: torch.Tensor, b_s: torch.Tensor, step: int,
                       sms: int) -> torch.Tensor:
    """The wgmma GEMV over row chunks of ``step`` rows, each written straight into its rows of one
    [M, N] output (a chunk of a / a_s is a contiguous, 16-byte aligned row range: a row is
    K % 512 == 0 bytes, and 32 scale rows a multiple of 16 bytes)."""
    m, k = a.shape
    n = b.shape[0]
    c = torch.empty(m, n, dtype=torch.bfloat16, device=a.device)
    for r0 in range(0, m, step):
        rows = min(step, m - r0)
        wgmma_gemv.fp4_wgmma_gemv(a[r0:r0 + rows], a_s[r0:r0 + rows], b, b_s,
                                  wgmma_gemv.pick_config(n, k, rows, sms), out=c[r0:r0 + rows])
    return c


def _tiled(a, a_s, b, b_s, cfg):
    config, aligned = cfg
    return tiled.fp4_gemm_tiled(a, a_s, b, b_s, config, aligned)


_LAUNCH = {
    "wgmma_gemv": lambda a, a_s, b, b_s, cfg, p: wgmma_gemv.fp4_wgmma_gemv(a, a_s, b, b_s, cfg),
    "mma_gemv": lambda a, a_s, b, b_s, cfg, p: mma_gemv.mma_gemv(a, a_s, b, b_s, True, cfg),
    "expand_fp8": lambda a, a_s, b, b_s, cfg, p: fp4_via_fp8(a, a_s, b, b_s),
    "wgmma_gemv_chunks": lambda a, a_s, b, b_s, cfg, p: _wgmma_gemv_chunks(a, a_s, b, b_s, cfg, p.sms),
    "tiled": lambda a, a_s, b, b_s, cfg, p: _tiled(a, a_s, b, b_s, cfg),
}


def route(p: Problem) -> tuple[Rule, Any]:
    """(the first rule that takes ``p``, its configuration)."""
    for rule in RULES:
        if rule.m_min <= p.m and (rule.m_max is None or p.m <= rule.m_max) and rule.accepts(p):
            return rule, rule.config(p)
    raise AssertionError("unreachable: the last rule takes every problem")


def problem(a: torch.Tensor, a_s: torch.Tensor, b: torch.Tensor, b_s: torch.Tensor) -> Problem:
    """The :class:`Problem` of a call on 2-D contiguous operands (b, b_s as uint8)."""
    dev = a.device
    arch = fp8_dispatch.device_arch(dev)
    capturing = dev.type == "cuda" and torch.cuda.is_current_stream_capturing()
    return Problem(a.shape[0], b.shape[0], a.shape[1], arch, sm_count(dev, interpret=132),
                   a.data_ptr() % 16 == 0 and b.data_ptr() % 16 == 0 and b_s.data_ptr() % 16 == 0,
                   wgmma_gemv.GLUON_ERROR is None, capturing=capturing)


def fp4_gemm(a: torch.Tensor, a_s: torch.Tensor, b: torch.Tensor, b_s: torch.Tensor) -> torch.Tensor:
    """Run the routed kernel: a e4m3 [M, K] contiguous, a_s [M, K/128] contiguous; b uint8 [N, K/2],
    b_s uint8 UE8M0 [N, K/32] (contiguous) -> bf16 [M, N]."""
    p = problem(a, a_s, b, b_s)
    rule, cfg = route(p)
    return _LAUNCH[rule.kernel](a, a_s, b, b_s, cfg, p)


def dispatch_table() -> list[dict]:
    """The rules as rows (op, kernel, M band, GPU, conditions, configuration), in order."""
    return [dict(op="fp4_gemm", kernel=r.kernel, m=fp8_dispatch.m_band(r), gpu=r.gpu, when=r.when, config=r.how)
            for r in RULES]
