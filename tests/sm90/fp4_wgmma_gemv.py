"""Compile the Gluon FP4 decode GEMV (``lowbit/ops/fp4_gemm/gluon_wgmma_gemv.py``) for sm_90 without
a GPU and report per config: registers / spills / shared memory, ptxas's wgmma notes, and the
SASS opcode counts of one stage (the K loop), per 64 x 128 block.

Run from the repository root: ``python -m tests.sm90.fp4_wgmma_gemv [--dump DIR]``.
"""
from __future__ import annotations

import argparse
import os
import sys

os.environ.pop("TRITON_INTERPRET", None)  # before triton is imported


from tests.sm90.fp8_gemm_gluon import ptxas_notes  # noqa: E402
from tests.sm90.compiler import compile_gluon_sm90, loop_report, qgmma_loop  # noqa: E402

CONFIGS = (  # (M, N, K, STAGES, SPLIT, W, PIPE, a_s e8m0[, LDSM_AHEAD (default True)[, X_FIRST]])
    (16, 24576, 1536, 2, 1, 4, False, False),
    (16, 24576, 1536, 2, 1, 4, False, False, False),
    (16, 7168, 2048, 2, 1, 4, False, False),
    (16, 7168, 2048, 2, 1, 4, False, False, True, True),
    (16, 7168, 2048, 4, 1, 4, False, False, True, True),
    (16, 24576, 1536, 2, 2, 4, False, False),
    (16, 24576, 1536, 4, 1, 4, True, False),
    (1, 24576, 1536, 4, 1, 4, False, False),
    (1, 24576, 1536, 4, 1, 4, True, False),
    (16, 24576, 1536, 4, 1, 8, False, False),
    (16, 7168, 2048, 1, 4, 8, False, False),
    (16, 4096, 7168, 3, 7, 4, True, True),
    (16, 7168, 16384, 3, 16, 4, False, False),
)
#: the wgmma's N = 32 (M = 17..32): ``--wide``
WIDE_CONFIGS = (
    (32, 7168, 2048, 2, 1, 4, False, False, True, True),
    (32, 24576, 1536, 2, 1, 4, False, False, True, True),
    (32, 7168, 16384, 2, 8, 4, False, False, True, True),
    (32, 4096, 7168, 2, 4, 8, False, False, True, True),
)


def compile_sm90(m, n, k, stages, split, w, pipe, e8m0, ldsm=True, x_first=False, pdl=False):
    import torch
    import triton
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from lowbit.ops.fp4_gemm import gluon_wgmma_gemv as g

    a = torch.empty((m, k // 4), dtype=torch.int32)
    a_s = torch.empty((m, k // 128), dtype=torch.uint8 if e8m0 else torch.float32)
    b = torch.empty((n, k // 2), dtype=torch.uint8)
    b_s = torch.empty((n, k // 32), dtype=torch.uint8)
    c = torch.empty((m, n), dtype=torch.bfloat16)
    ws = torch.empty((split, g.wgmma_n(m), n), dtype=torch.float32)
    cnt = torch.empty(1024, dtype=torch.int32)
    w_l = gl.NVMMASharedLayout.get_default_for([16 * w, 128], gl.uint8)
    s_l = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=8, rank=2)
    args = dict(w_desc=TensorDescriptor.from_tensor(b, [16 * w, 128], w_l),
                s_desc=TensorDescriptor.from_tensor(b_s, [16 * w, 16], s_l), a_ptr=a, as_ptr=a_s, c_ptr=c, ws_ptr=ws,
                cnt_ptr=cnt, M=m, N=n, n_stages=k // 512)
    n_st = k // 512
    per = triton.next_power_of_2(-(-n_st // split))
    constexprs = dict(K=k, NB=g.wgmma_n(m), PER_SPLIT=per, STAGES=stages, SPLIT=-(-n_st // per), AS_E8M0=e8m0,
                      PIPE=pipe, W=w, SPIN=split > 1, LDSM_AHEAD=ldsm, X_FIRST=x_first, PDL=pdl, TRIGGER=False)
    return compile_gluon_sm90(g._fp4_wgmma_gemv_kernel, args, constexprs, {"M", "n_stages"}, num_warps=w)


def check_dispatch(ms=(1, 8, 16, 32)) -> int:
    """Compile, for sm_90 and without a GPU, the launches ``fp4_wgmma_gemv`` itself makes (its own
    config pick, split-K by the arrival counter, PDL and trigger defaults) at these M on the
    benchmark's decode shapes, with fp32 and with UE8M0 activation scales, on a 132-SM GPU
    (``compiler.decode_gemv_launches``). One line each; the count of failures."""
    import torch

    from lowbit.ops.fp4_gemm import gluon_wgmma_gemv as g
    from tests.sm90.compiler import compile_recorded, decode_gemv_launches

    def operands(m, n, k, e8m0):
        return (torch.empty((m, k), dtype=torch.float8_e4m3fn),
                torch.empty((m, k // 128), dtype=torch.float8_e8m0fnu if e8m0 else torch.float32),
                torch.empty((n, k // 2), dtype=torch.uint8), torch.empty((n, k // 32), dtype=torch.uint8))

    launches = decode_gemv_launches(g.fp4_wgmma_gemv, "_fp4_wgmma_gemv_kernel", operands, ms,
                                    [(g, "_sm_count", lambda device: 132)])
    return sum(compile_recorded(seen, lambda fn, kw: f"{case} split {kw['SPLIT']} W {kw['W']} NB {kw['NB']}", "QGMMA")
               for case, seen in launches)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump", default=None)
    ap.add_argument("--pdl", action="store_true", help="compile every config as a programmatic dependent launch")
    ap.add_argument("--wide", action="store_true", help="the M = 32 (wgmma N = 32) configs instead")
    ap.add_argument("--dispatch", action="store_true",
                    help="compile what fp4_wgmma_gemv launches on the benchmark shapes instead; exit 1 on a failure")
    args = ap.parse_args()
    if args.dispatch:
        return 1 if check_dispatch() else 0
    for cfg in WIDE_CONFIGS if args.wide else CONFIGS:
        kern = compile_sm90(*cfg, **({"pdl": True} if args.pdl else {}))
        ldsm = cfg[8] if len(cfg) > 8 else True
        xf = len(cfg) > 9 and cfg[9]
        loop_report(kern, f"M{cfg[0]} N{cfg[1]} K{cfg[2]} stages {cfg[3]} split {cfg[4]} W {cfg[5]} pipe {cfg[6]}"
                    + ("" if ldsm else " ldsm at block") + (" x first" if xf else ""),
                    qgmma_loop, extra=" = {n} / 4 per block of 16 rows x 128 per warp; ptxas: "
                    + (", ".join(ptxas_notes(kern)) or "no wgmma notes").replace("{", "{{").replace("}", "}}"),
                    dump_dir=args.dump,
                    dump_name=f"m{cfg[0]}_n{cfg[1]}_k{cfg[2]}_r{cfg[3]}_s{cfg[4]}_w{cfg[5]}_p{int(cfg[6])}" + ("" if ldsm else "_at")
                    + ("_xf" if xf else "") + ".sass")
    return 0


if __name__ == "__main__":
    sys.exit(main())
