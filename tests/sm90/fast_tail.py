"""Compile the Triton kernels around the draft head's fast-mode coarse pass for sm_90 without a GPU:
the x preparation (``coarse_head/x_int8.py``), the selection and the exact rerank
(``coarse_head/select.py``), as their launchers launch them on the H200 -- programmatic dependent
launches with their triggers, the bitonic selection over the pass's candidates, one or four picks a
rerank program -- at every M band of the 124160 x 5120 benchmark head (and SmolLM2's 49152 x 576).
The launchers run on CPU stand-ins with their kernels recorded (``compiler.record_launches``);
the interpreter tier runs these kernels in CI, but only ptxas sees their inline PTX
(``mul.rn.f32``, ``griddepcontrol``) and the int64 ``tl.topk`` as sm_90 code.

Run from the repository root: ``python -m tests.sm90.fast_tail`` (exit 1 on a failure).
"""
from __future__ import annotations

import os
import sys

os.environ.pop("TRITON_INTERPRET", None)  # before triton is imported


from tests.sm90.compiler import compile_recorded, record_launches  # noqa: E402

#: (N, K) of the heads; M of every band; the fast mode's defaults (kcand 8, rerank 32, block 128)
HEADS = ((124160, 5120), (49152, 576))
MS = (1, 8, 16, 32, 64)
KCAND, RERANK, BLOCK = 8, 32, 128


def tail_launches(n: int, k: int, m: int, bits: int) -> list:
    """The x preparation's, the selection's and the rerank's recorded launches for M rows of x
    against an INT``bits`` head of n x k, as on an sm_90 GPU (PDL on)."""
    import torch

    import lowbit.ops._triton_pdl as pdl
    from lowbit.formats import INTx
    from lowbit.ops.coarse_head import select, x_int8

    p = 8 // bits
    ell = INTx.quantize(torch.zeros(1, k), bits=bits, group_size=64).packed.shape[1]
    nb = max(8, 1 << (m - 1).bit_length())
    c = -(-n // BLOCK) * KCAND
    x = torch.empty((m, k), dtype=torch.bfloat16)
    w = torch.empty((n, k), dtype=torch.bfloat16)

    def run():
        x_int8.x_int8_tiles(x, ell, p, nb, perm=bits == 2, wide=True, trigger=True)
        sel = torch.empty((m, RERANK), dtype=torch.int64)
        select.launch_select(torch.empty((m, c)), torch.empty((m, c), dtype=torch.int64), sel, KCAND, n)
        select.launch_rerank(x, w, sel, torch.empty((m, RERANK)), torch.empty((m, 1)),
                             torch.empty((m, 1), dtype=torch.int64))

    kernels = [(x_int8, "_x_int8_kernel"), (select, "_select_topk_kernel"), (select, "_select2_kernel"),
               (select, "_select_kernel"), (select, "_rerank_kernel")]
    return record_launches(run, kernels, [(pdl, "capability_at_least", lambda device, cap: True)])


def main() -> int:
    failed = 0
    for n, k in HEADS:
        for bits in (2, 4):
            for m in MS:
                # ACQBULK: griddepcontrol.wait -- each is compiled as the programmatic dependent launch it ships as
                failed += compile_recorded(tail_launches(n, k, m, bits),
                                           lambda fn, kw: f"N{n} K{k} INT{bits} M = {m} {fn.fn.__name__}", "ACQBULK")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
