"""Which kernel, with which configuration, serves a draft-head call: the one place that decides.

Two decisions, each an ordered table whose first matching row wins:

* :data:`COARSE_ROUTES` -- the coarse pass of :func:`lowbit.ops.coarse_head.coarse_head` for
  (mode, packing kind / bits, group, M, block, GPU arch);
* :data:`TAIL_ROUTES` -- what follows it for ``DraftHead.argmax`` / ``topk`` (selection and
  rescoring, certification and fallback), for (mode, k, weight, x, backend).

The kernels take the configuration they are handed; none re-derives its route.
``python -m lowbit.ops.coarse_head.dispatch [N K]`` prints both tables resolved for a head.
The measurements behind each threshold are in docs/draft_head.md.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from lowbit.ops.coarse_head.packing import KIND_FP8, KIND_INTX, KIND_NVFP4
from lowbit.ops.coarse_head.reference import BOUND_DET, BOUND_NONE

#: fast mode on an INTx copy, per bits: the rows of x (inclusive) that take the int8-wgmma pass on
#: an sm_90 GPU (INT2 its whole-row variant -- group scales rounded to integer multiples of one unit
#: a row, one int32 wgmma chain over all of K, the same fast-mode accuracy on SmolLM2's head as the
#: exact scales -- INT4 per group). Faster than the mma.sync pass at every M on 124160 x 5120 and
#: 49152 x 576 (H200).
WGMMA_M_RANGE = {2: (1, 64), 4: (1, 64)}
#: the ``mma.sync`` tensor-core pass up to this M: fast mode, and certified mode with the
#: deterministic bound (its bound is accumulated in the epilogue); the fp32 kernel beyond
MMA_MAX_M = {BOUND_NONE: 16, BOUND_DET: 8}
#: certified argmax on a dense bf16 / fp16 head from this many rows on: one launch over the stored
#: rows (:mod:`.fused_argmax`) instead of the INTx coarse pass + the certified tail
FUSED_ARGMAX_MIN_M = 4
#: the largest k the sync-free certified tail answers (its per-row lists live in registers)
CERTIFIED_MAX_K = 64
#: dtypes whose products the tensor cores form exactly (x and weight of the same one)
FUSED_DTYPES = (torch.bfloat16, torch.float16)


@dataclass(frozen=True)
class CoarseCall:
    """What the coarse-pass route depends on. ``ell``: packed bytes a row (INTx) or K (native);
    ``aligned``: INTx rows of whole, 16-byte aligned int32 words; ``sm90``: Gluon importable and
    an sm_90 GPU; ``tiling``: whether the kernel-specific tilings exist or may be built (False only
    inside a torch.compile trace that warmup did not prepare)."""

    kind: int
    bits: int | None
    group_size: int
    ell: int
    m: int
    bound: int
    block: int
    sm90: bool
    aligned: bool
    tiling_mma: bool = True
    tiling_wgmma: bool = True


def _wgmma(c: CoarseCall) -> bool:
    lo, hi = WGMMA_M_RANGE.get(c.bits, (1, 0))
    return (c.bound == BOUND_NONE and c.kind == KIND_INTX and c.sm90 and lo <= c.m <= hi
            and c.block in (64, 128) and c.group_size % 64 == 0 and c.ell % 64 == 0 and c.tiling_wgmma)


def _mma(c: CoarseCall) -> bool:
    return (c.kind == KIND_INTX and c.m <= MMA_MAX_M.get(c.bound, 0) and c.group_size % 64 == 0
            and c.block % 32 == 0 and 32 <= c.block <= 256 and c.ell % 4 == 0 and c.tiling_mma)


def _half2(c: CoarseCall) -> bool:
    return c.bound == BOUND_NONE and c.kind == KIND_INTX and c.m == 1 and c.aligned


@dataclass(frozen=True)
class Route:
    """One row of a dispatch table: ``kernel`` (the module that runs), ``when`` (the condition, for
    people), ``test`` (the same condition, for the code)."""

    kernel: str
    when: str
    test: Callable[..., bool]


#: the coarse pass, first match wins
COARSE_ROUTES = (
    Route("wgmma_int8", "fast; INT2 (whole-row) / INT4; M in WGMMA_M_RANGE; sm_90; g % 64 == 0; block 64 / 128",
          _wgmma),
    Route("mma_f16", "INTx, g % 64 == 0; fast M <= 16 or certified (det bound) M <= 8; block 32..256", _mma),
    Route("gemv_half2", "fast; INTx; M == 1; aligned rows", _half2),
    Route("coarse_fp32", "everything else: certified beyond M = 8, the stat bound, FP8 / NVFP4 rows; "
          "per M band (coarse_fp32.CONFIGS)", lambda c: True),
)


def coarse_route(c: CoarseCall) -> str:
    """The kernel that serves the coarse pass ``c`` (see :data:`COARSE_ROUTES`)."""
    return next(r.kernel for r in COARSE_ROUTES if r.test(c))


@dataclass(frozen=True)
class TailCall:
    """What the route after the coarse pass depends on."""

    mode: str  # "fast" | "certified"
    k: int
    argmax: bool  # only the best index is asked for (``DraftHead.argmax``), not values
    m: int
    dense: bool  # the weight is a dense tensor (not FP8 / NVFP4)
    same_16bit: bool  # x and weight of one dtype in FUSED_DTYPES, the weight's K stride 1
    triton: bool  # the call runs the Triton kernels


#: after the coarse pass, first match wins
TAIL_ROUTES = (
    Route("fast_select", "fast; dense weight; Triton: selection + exact rerank, two launches",
          lambda t: t.mode == "fast" and t.dense and t.triton),
    Route("torch_rerank", "fast otherwise: torch top-k, gathered_dot, top-k", lambda t: t.mode == "fast"),
    Route("fused_argmax", "certified argmax; dense bf16 / fp16 x and weight; M >= FUSED_ARGMAX_MIN_M; Triton: "
          "one launch over the stored rows (no INTx coarse pass)",
          lambda t: t.argmax and t.dense and t.same_16bit and t.m >= FUSED_ARGMAX_MIN_M and t.triton),
    Route("certified_tail", "certified; dense weight; k <= CERTIFIED_MAX_K; Triton: certify, rescore and "
          "fall back in one launch, no host sync", lambda t: t.dense and t.k <= CERTIFIED_MAX_K and t.triton),
    Route("certified_sync", "certified otherwise: torch ops, one host sync, gathered_dot rescoring",
          lambda t: True),
)


def tail_route(t: TailCall) -> str:
    """The tail that follows the coarse pass for ``t`` (see :data:`TAIL_ROUTES`)."""
    return next(r.kernel for r in TAIL_ROUTES if r.test(t))


def same_16bit(x: torch.Tensor, weight) -> bool:
    """x and a dense weight of one 16-bit float dtype, the weight with unit stride along K."""
    return (isinstance(weight, torch.Tensor) and x.dtype == weight.dtype and x.dtype in FUSED_DTYPES
            and weight.dim() == 2 and weight.stride(1) == 1)


def dispatch_table(n: int = 49152, k: int = 576, ms=(1, 4, 8, 16, 32, 64), sm90: bool = True) -> list[dict]:
    """Rows (mode, coarse copy, M, coarse kernel, tail) of ``DraftHead(W[n, k], ...)`` with the
    defaults (g64, block 128, kcand 4 certified / 8 fast) for a dense bf16 head, each INTx width
    and FP8 / NVFP4 rows, on an sm_90 GPU (``sm90=False``: another CUDA GPU)."""
    rows = []
    for mode in ("fast", "certified"):
        for fmt in ("int2", "int4", "int8", "fp8 rows", "nvfp4 rows"):
            kind = KIND_INTX if fmt.startswith("int") else KIND_FP8 if fmt.startswith("fp8") else KIND_NVFP4
            bits = int(fmt[3]) if kind == KIND_INTX else None
            ell = -(-k // (8 // bits) // 64) * 64 if bits else k
            bound = BOUND_NONE if mode == "fast" else BOUND_DET
            for m in ms:
                c = CoarseCall(kind, bits, 64, ell, m, bound, 128, sm90, True)
                t = TailCall(mode, 1, True, m, kind == KIND_INTX, kind == KIND_INTX, True)
                tail = tail_route(t)
                coarse = "-" if tail == "fused_argmax" else coarse_route(c)
                rows.append({"mode": mode, "coarse copy": fmt, "M": m, "coarse pass": coarse, "argmax tail": tail,
                             "topk(16) tail": tail_route(TailCall(mode, 16, False, m, t.dense, t.same_16bit, True))})
    return rows


__all__ = ["CERTIFIED_MAX_K", "COARSE_ROUTES", "FUSED_ARGMAX_MIN_M", "FUSED_DTYPES", "MMA_MAX_M", "TAIL_ROUTES",
           "WGMMA_M_RANGE", "CoarseCall", "Route", "TailCall", "coarse_route", "dispatch_table",
           "same_16bit", "tail_route"]


if __name__ == "__main__":
    import sys

    args = [int(a) for a in sys.argv[1:3]]
    for r in (*COARSE_ROUTES, *TAIL_ROUTES):
        print(f"{r.kernel:16s} {r.when}")
    print()
    table = dispatch_table(*args)
    cols = list(table[0])
    print(" | ".join(cols))
    for row in table:
        print(" | ".join(str(row[c]) for c in cols))
