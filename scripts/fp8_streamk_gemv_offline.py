"""Compile the stream-K FP8 decode GEMV (``lowbit/ops/fp8_gemm/gluon_streamk_gemv.py``) for sm_90
without a GPU and report per config: registers / spills / shared memory, ptxas's wgmma notes and
the SASS opcode counts of the unit loop.

Run from the repository root: ``python scripts/fp8_streamk_gemv_offline.py [--dump DIR]``.
"""
from __future__ import annotations

import argparse
import os
import sys

os.environ.pop("TRITON_INTERPRET", None)  # before triton is imported

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from gluon_fp8_offline import ptxas_notes  # noqa: E402
from sm90_offline import compile_gluon_sm90, loop_report, qgmma_loop  # noqa: E402

CONFIGS = (  # (M, N, K, CTAs an SM, STAGES, W, a_s e8m0, b_s e8m0, MODE)
    (1, 2112, 7168, 2, 6, 4, False, False, 0),
    (1, 2112, 7168, 2, 6, 4, False, False, 1),
    (16, 24576, 1536, 2, 6, 4, True, True, 0),
    (16, 24576, 1536, 2, 4, 4, False, False, 1),
    (16, 24576, 1536, 2, 4, 4, False, False, 2),
    (64, 7168, 16384, 1, 8, 4, False, False, 0),
    (64, 7168, 16384, 1, 8, 4, False, False, 1),
    (64, 4096, 7168, 1, 4, 8, False, False, 0),
    (64, 7168, 16384, 1, 4, 16, False, False, 1),
    (64, 7168, 16384, 1, 4, 16, False, False, 2),
    (64, 7168, 16384, 1, 6, 8, False, False, 1),
)


def compile_sm90(m, n, k, per_sm, stages, w, as_e8m0, bs_e8m0, mode, sms=132):
    import torch
    import triton
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from lowbit.ops.fp8_gemm import gluon_streamk_gemv as g

    kb = k // 128
    nb = g._nb(m)
    plan = g.streamk_plan(n, k, w, per_sm * sms)
    a = torch.empty((m, k), dtype=torch.float8_e4m3fn)
    b = torch.empty((n, k), dtype=torch.float8_e4m3fn)
    a_s = torch.empty((m, kb), dtype=torch.uint8 if as_e8m0 else torch.float32)
    b_s = torch.empty((-(-n // 128), kb), dtype=torch.uint8 if bs_e8m0 else torch.float32)
    c = torch.empty((m, n), dtype=torch.bfloat16)
    ws = torch.empty((plan["grid"], 2, nb, 16 * w), dtype=torch.float32)
    cnt = torch.empty(8192, dtype=torch.int32)
    w_l = gl.NVMMASharedLayout.get_default_for([16 * w, 128], gl.float8e4nv)
    x_l = gl.NVMMASharedLayout.get_default_for([nb, 128], gl.float8e4nv)
    args = dict(w_desc=TensorDescriptor.from_tensor(b, [16 * w, 128], w_l),
                x_desc=TensorDescriptor.from_tensor(a, [nb, 128], x_l), as_ptr=a_s, bs_ptr=b_s, c_ptr=c, ws_ptr=ws,
                cnt_ptr=cnt, M=m, N=n, KB=kb, TILES=plan["tiles"])
    constexprs = dict(NB=nb, PER=triton.next_power_of_2(plan["per"]), STAGES=min(stages, plan["per"]),
                      MAXC=triton.next_power_of_2(plan["maxc"]), AS_E8M0=as_e8m0, BS_E8M0=bs_e8m0, W=w, MODE=mode)
    return compile_gluon_sm90(g._fp8_streamk_gemv_kernel, args, constexprs, {"M", "KB", "TILES"}, num_warps=w), plan


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump", default=None)
    args = ap.parse_args()
    for cfg in CONFIGS:
        kern, plan = compile_sm90(*cfg)
        loop_report(kern, f"M{cfg[0]} N{cfg[1]} K{cfg[2]} {cfg[3]}/SM stages {cfg[4]} W {cfg[5]} mode {cfg[8]} "
                    f"plan {plan}",
                    qgmma_loop, extra="; ptxas: "
                    + (", ".join(ptxas_notes(kern)) or "no wgmma notes").replace("{", "{{").replace("}", "}}"),
                    dump_dir=args.dump, dump_name=f"m{cfg[0]}_n{cfg[1]}_k{cfg[2]}_w{cfg[5]}_mode{cfg[8]}.sass")
    return 0


if __name__ == "__main__":
    sys.exit(main())
