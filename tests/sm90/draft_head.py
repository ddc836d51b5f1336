"""Compile, for sm_90 and without a GPU, every kernel launch the draft head makes as it dispatches
on an H100 / H200: the pipelines of :mod:`lowbit.ops.coarse_head.pipeline` run on CPU stand-ins
(empty tensors of the real shapes) with every kernel recorded instead of launched
(``compiler.record_launches``), then each distinct launch is compiled once. What the interpreter
tier cannot see is checked here: the Gluon int8-wgmma pass, the inline PTX (``mma.sync``,
``mul.rn``, ``griddepcontrol``), the register caps and the int64 ``tl.topk`` as sm_90 code.

Covered: fast mode INT2 / INT4 (the wgmma pass, selection, rerank) and INT8 (mma.sync pass),
certified INT8 (the mma.sync pass with the deterministic bound, the fp32 kernel beyond M = 8 and
for the statistical bound, the certified tail at k = 1 / 16 / 64 with the configured sizes and
with ``DraftHead``'s per-k defaults, the fused argmax), FP8 / NVFP4
rows (the fp32 kernel), on SmolLM2's 49152 x 576 head at every M band and on the 124160 x 5120
benchmark head at three.

    python -m tests.sm90.draft_head      (exit 1 on a failure)
"""
from __future__ import annotations

import os
import sys

os.environ.pop("TRITON_INTERPRET", None)  # before triton is imported

from tests.sm90.compiler import compile_recorded, distinct_launches, record_launches  # noqa: E402

#: (N, K) -> M: on SmolLM2's head one M in every band of every kernel (the mma.sync pass's 1- / 4- /
#: 8-row tiles and two column tiles, the wgmma pass's NB 8 / 16 / 32 / 64, the fp32 kernel's and the
#: fused argmax's bands); on the long head, whose registers are the tighter, the first, a middle
#: and the last band (CI time: each distinct launch is a second or two of ptxas)
HEADS = {(49152, 576): (1, 3, 8, 16, 32, 64), (124160, 5120): (1, 16, 64)}
SMS = 132


def _stand_in(kind: str, n: int, k: int, bits: int = 8, group: int = 64):
    """A ``CoarsePacking`` of empty CPU tensors shaped like the real one, with the kernels' tilings
    (nothing is quantized: a recorded launch needs only shapes, dtypes and strides)."""
    import torch

    from lowbit.formats import FP8, INTx, NVFP4
    from lowbit.ops.coarse_head import KIND_FP8, KIND_INTX, KIND_NVFP4, CoarsePacking
    from lowbit.ops.coarse_head.wgmma_pack import wgmma_sz_bytes

    if kind == "intx":
        ell = INTx.quantize(torch.zeros(1, k), bits=bits, group_size=group).packed.shape[1]
        ng = ell * (8 // bits) // group
        fmt = INTx(torch.empty(n, ell, dtype=torch.uint8), torch.empty(n, ng, dtype=torch.float16),
                   torch.empty(n, ng, dtype=torch.uint8), bits, group, k)
        p = CoarsePacking(KIND_INTX, fmt, n, k, bits, group)
        nr, ns = -(-n // 32), -(-(ell // 4) // 16)
        p._mma = (torch.empty(nr, ns, 4, 32, 4, dtype=torch.int32), torch.empty(nr, ng, 32, dtype=torch.int32))
        p._wgmma = torch.empty(wgmma_sz_bytes(n, bits, ell), dtype=torch.uint8)
        p._wgmma_table = (torch.empty(2 * (ell // 64), -(-n // 4) * 4, dtype=torch.int32), torch.empty(n))
        return p
    if kind == "fp8":
        return CoarsePacking(KIND_FP8, FP8(torch.empty(n, k, dtype=torch.float8_e4m3fn), torch.empty(n, 1), "row"),
                             n, k, None, k)
    fmt = NVFP4(torch.empty(n, k // 2, dtype=torch.uint8), torch.empty(n, k // 16, dtype=torch.float8_e4m3fn),
                torch.empty(()))
    return CoarsePacking(KIND_NVFP4, fmt, n, k, None, 16)


def _kernels() -> list:
    from lowbit.ops.coarse_head import (certified_tail, coarse_fp32, fast_select, fused_argmax, gemv_half2, mma_f16,
                                        wgmma_int8, x_int8)

    return [(x_int8, "_x_int8_kernel"), (wgmma_int8, "_coarse_ws_kernel"), (wgmma_int8, "_coarse_wgmma_kernel"),
            (mma_f16, "_x_frag_kernel"), (mma_f16, "_coarse_mma_kernel"), (gemv_half2, "_x_pairs_kernel"),
            (gemv_half2, "_coarse_gemv_h2_kernel"), (coarse_fp32, "_x_stats_kernel"),
            (coarse_fp32, "_coarse_head_kernel"), (fast_select, "_select_kernel"),
            (fast_select, "_select_topk_kernel"), (fast_select, "_rerank_kernel"),
            (certified_tail, "_certified_tail_kernel"), (fused_argmax, "_fused_argmax_kernel")]


def _patches() -> list:
    """The dispatch as on an sm_90 GPU of SMS SMs: Triton chosen, Gluon available, no interpreter."""
    import lowbit.ops._triton_pdl as pdl
    from lowbit.ops.coarse_head import (certified_tail, coarse, coarse_fp32, fused_argmax, gemv_half2, mma_f16,
                                        pipeline, wgmma_int8, x_int8)

    yes = lambda *a, **k: True  # noqa: E731
    no = lambda *a, **k: False  # noqa: E731
    out = [(coarse, "use_triton", yes), (pipeline, "use_triton", yes), (coarse, "_sm90", yes),
           (pdl, "interpret_mode", no), (pdl, "capability_at_least", yes),
           (wgmma_int8, "sm_count", lambda device, interpret: SMS)]
    for mod in (x_int8, wgmma_int8, mma_f16, gemv_half2, coarse_fp32, certified_tail, fused_argmax):
        if hasattr(mod, "interpret_mode"):
            out.append((mod, "interpret_mode", no))
    return out


def launches(n: int, k: int, m: int) -> list:
    """Every launch of the draft head's calls on an n x k bf16 head for M rows of x, recorded."""
    import torch

    from lowbit.ops.coarse_head import BOUND_DET, BOUND_STAT, HeadConfig, HeadState, coarse_head, pipeline

    x = torch.empty(m, k, dtype=torch.bfloat16)
    w = torch.empty(n, k, dtype=torch.bfloat16)

    def run():
        fast = HeadConfig("fast", 8, 32, "det", 4.0, 128)
        cert = HeadConfig("certified", 4, 128, "det", 4.0, 128)
        for bits in (2, 4, 8):
            state = HeadState(w, _stand_in("intx", n, k, bits), fast)
            pipeline.fast_topk(state, x, 1, argmax=True)
            pipeline.fast_topk(state, x, 16)
        # the configured sizes, and DraftHead's defaults (kcand / rerank unset: sized per k,
        # pipeline.certified_sizes, with block rescans)
        for cfg in (cert, HeadConfig("certified", 4, 128, "det", 4.0, 128, kcand_per_k=True, rerank_per_k=True)):
            state = HeadState(w, _stand_in("intx", n, k, 8), cfg, norms=torch.empty(n))
            pipeline.certified_topk(state, x, 1, argmax=True)
            for kout in (1, 16, 64):
                pipeline.certified_topk(state, x, kout)
        coarse_head(x, state.packing, block=128, kcand=4, bound=BOUND_STAT)
        for kind in ("fp8", "nvfp4"):
            coarse_head(x, _stand_in(kind, n, k), block=128, kcand=4, bound=BOUND_DET)

    return record_launches(run, _kernels(), _patches())


def main() -> int:
    recorded = [rec for (n, k), ms in HEADS.items() for m in ms for rec in launches(n, k, m)]
    distinct = distinct_launches(recorded)
    names = sorted({fn.__name__ if hasattr(fn, "__name__") else fn.fn.__name__ for fn, _, _ in distinct})
    print(f"{len(recorded)} launches recorded, {len(distinct)} distinct, kernels: {' '.join(names)}", flush=True)
    failed = compile_recorded(distinct, lambda fn, kw: f"{getattr(fn, '__name__', None) or fn.fn.__name__} "
                              + " ".join(f"{a}={v}" for a, v in kw.items() if a.isupper() and a != "INTERPRET"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
