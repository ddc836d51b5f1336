"""Compile the Gluon FP8 decode GEMV (``lowbit/ops/fp8_gemm/gluon_wgmma_gemv.py``) for sm_90 without a
GPU and report per config: registers / spills / shared memory, ptxas's wgmma notes and the SASS
opcode counts of the K loop.

Run from the repository root: ``python -m tests.sm90.fp8_wgmma_gemv [--dump DIR]``.
"""
from __future__ import annotations

import argparse
import os
import sys

os.environ.pop("TRITON_INTERPRET", None)  # before triton is imported


from tests.sm90.fp8_gemm_gluon import ptxas_notes  # noqa: E402
from tests.sm90.compiler import compile_gluon_sm90, loop_report, qgmma_loop  # noqa: E402

CONFIGS = (  # (M, N, K, STAGES, SPLIT, W, a_s e8m0, b_s e8m0, PIPE)
    (64, 7168, 16384, 4, 4, 8, False, False, False),
    (64, 7168, 16384, 4, 4, 8, False, False, True),
    (64, 7168, 16384, 4, 2, 4, False, False, True),
    (16, 7168, 16384, 4, 4, 8, False, False, True),
    (1, 2112, 7168, 3, 4, 4, True, True, True),
    (33, 24576, 1536, 4, 1, 8, False, False, True),
)


def compile_sm90(m, n, k, stages, split, w, as_e8m0, bs_e8m0, pipe, pdl=False):
    import torch
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from lowbit.ops.fp8_gemm import gluon_wgmma_gemv as g

    kb = k // 128
    nb = g._nb(m)
    a = torch.empty((m, k), dtype=torch.float8_e4m3fn)
    b = torch.empty((n, k), dtype=torch.float8_e4m3fn)
    a_s = torch.empty((m, kb), dtype=torch.uint8 if as_e8m0 else torch.float32)
    b_s = torch.empty((-(-n // 128), kb), dtype=torch.uint8 if bs_e8m0 else torch.float32)
    c = torch.empty((m, n), dtype=torch.bfloat16)
    ws = torch.empty((split, nb, n), dtype=torch.float32)
    cnt = torch.empty(1024, dtype=torch.int32)
    w_l = gl.NVMMASharedLayout.get_default_for([16 * w, 128], gl.float8e4nv)
    x_l = gl.NVMMASharedLayout.get_default_for([nb, 128], gl.float8e4nv)
    per = -(-kb // split)
    args = dict(w_desc=TensorDescriptor.from_tensor(b, [16 * w, 128], w_l),
                x_desc=TensorDescriptor.from_tensor(a, [nb, 128], x_l), as_ptr=a_s, bs_ptr=b_s, c_ptr=c, ws_ptr=ws,
                cnt_ptr=cnt, M=m, N=n, KB=kb)
    constexprs = dict(NB=nb, PER_SPLIT=per, PER_ALLOC=1 << (per - 1).bit_length(), STAGES=min(stages, per),
                      SPLIT=-(-kb // per), AS_E8M0=as_e8m0, BS_E8M0=bs_e8m0, W=w, PIPE=pipe, PDL=pdl, TRIGGER=pdl)
    return compile_gluon_sm90(g._fp8_wgmma_gemv_kernel, args, constexprs, {"M", "KB"}, num_warps=w)


def check_dispatch(ms=(1, 8, 16, 32, 64)) -> int:
    """Compile, for sm_90 and without a GPU, the launches ``fp8_wgmma_gemv`` itself makes (its own
    config pick, PDL and trigger defaults) at these M on the benchmark's decode shapes, with fp32
    and with UE8M0 scales (``compiler.decode_gemv_launches``). One line each; the count of
    failures."""
    import torch

    from lowbit.ops.fp8_gemm import gluon_wgmma_gemv as g
    from tests.sm90.compiler import compile_recorded, decode_gemv_launches

    def operands(m, n, k, e8m0):
        sdt = torch.float8_e8m0fnu if e8m0 else torch.float32
        return (torch.empty((m, k), dtype=torch.float8_e4m3fn), torch.empty((m, k // 128), dtype=sdt),
                torch.empty((n, k), dtype=torch.float8_e4m3fn), torch.empty((-(-n // 128), k // 128), dtype=sdt))

    return sum(compile_recorded(seen, lambda fn, kw: f"{case} split {kw['SPLIT']} W {kw['W']} NB {kw['NB']}", "QGMMA")
               for case, seen in decode_gemv_launches(g.fp8_wgmma_gemv, "_fp8_wgmma_gemv_kernel", operands, ms))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump", default=None)
    ap.add_argument("--pdl", action="store_true", help="compile every config as a programmatic dependent launch")
    ap.add_argument("--dispatch", action="store_true",
                    help="compile what fp8_wgmma_gemv launches on the benchmark shapes instead; exit 1 on a failure")
    args = ap.parse_args()
    if args.dispatch:
        return 1 if check_dispatch() else 0
    for cfg in CONFIGS:
        kern = compile_sm90(*cfg, pdl=args.pdl)
        loop_report(kern, f"M{cfg[0]} N{cfg[1]} K{cfg[2]} stages {cfg[3]} split {cfg[4]} W {cfg[5]} pipe {cfg[8]}",
                    qgmma_loop, extra="; ptxas: "
                    + (", ".join(ptxas_notes(kern)) or "no wgmma notes").replace("{", "{{").replace("}", "}}"),
                    dump_dir=args.dump,
                    dump_name=f"m{cfg[0]}_n{cfg[1]}_k{cfg[2]}_s{cfg[4]}_w{cfg[5]}_p{int(cfg[8])}.sass")
    return 0


if __name__ == "__main__":
    sys.exit(main())
