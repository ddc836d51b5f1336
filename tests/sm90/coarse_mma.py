"""Compile the draft head's tensor-core coarse pass (``coarse_head/triton_mma.py``) for sm_90
without a GPU and report what decides its speed: registers / spills (and so programs per SM and
waves over a 124160-token head), and the SASS instructions of the K-step loop per code.

    python -m tests.sm90.coarse_mma [--bits 2,4,8] [--nct 1,2] [--prefetch 0,1] [--bound 0,1] [--maxnreg N] [--ptxas=-O1]

Per (bits, column tiles, prefetch): ``REG / STACK / LOCAL`` of the cubin (with the launcher's
``maxnreg`` cap unless ``--maxnreg`` overrides it: 0 = none), programs of 4 warps per SM that the
registers allow, waves for the head's 970 programs on 132 SMs, and the loop body (the longest
backward-branch region holding HMMA) as instructions per code (a K step is 64 bytes of each of
the warp's 32 rows: 8192 INT2 / 4096 INT4 / 2048 INT8 codes per warp, 256 / 128 / 64 per lane).
"""
from __future__ import annotations

import argparse
import os
import re
import sys

os.environ.pop("TRITON_INTERPRET", None)  # before triton is imported

from tests.sm90.compiler import compile_sm90, cuobjdump, loop_body, resource_usage, root_cause, sass_lines  # noqa: E402

N, K, G, BLOCK = 124160, 5120, 64, 128
SMS = 132


def compile_one(bits: int, nct: int, prefetch: int, maxnreg: int | None, bound: int = 0, ptxas: str | None = None):
    from lowbit.ops.coarse_head import triton_mma as tm

    p = 8 // bits
    ell = K * bits // 8  # bytes of one plane run
    sig = {"xb_ptr": "*i32", "sx_ptr": "*fp32", "sb_ptr": "*fp32", "alpha_ptr": "*fp32", "w_ptr": "*i32",
           "sz_ptr": "*i32", "ck_ptr": "*fp32", "clb_ptr": "*fp32", "ci_ptr": "*i64", "blb_ptr": "*fp32",
           "brest_ptr": "*fp32", "lg_ptr": "*fp32", "M": "i32", "N": "i32", "NB": "i32", "NR": "i32",
           "bcoef": "fp32", "abs_slack": "fp32"}
    # plane j holds K positions [j L, (j + 1) L); NG groups of G along K
    const = dict(L=ell, NS=-(-(ell // 4) // 16), NG=K // G, P=p, SHIFT=bits, MASK=(1 << bits) - 1, G=G, BN=BLOCK,
                 MP=8 * nct, KCAND=4, NCT=nct, PREFETCH=prefetch, BOUND=bound, INTERPRET=False)
    for name in const:
        sig[name] = "constexpr"
    sig = {a: sig[a] for a in tm._coarse_mma_kernel.arg_names}
    shipped = ({"maxnreg": tm._CERTIFIED_CAP[(bits, nct)]} if bound and (bits, nct) in tm._CERTIFIED_CAP
               else tm._register_cap(bits, nct))
    opts = dict(shipped if maxnreg is None else ({"maxnreg": maxnreg} if maxnreg else {}))
    if ptxas:
        opts["ptx_options"] = ptxas
    return compile_sm90(tm._coarse_mma_kernel, sig, const, divisible=range(12), num_warps=BLOCK // 32, num_stages=1,
                        **opts), opts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bits", default="2,4,8")
    ap.add_argument("--nct", default="1,2")
    ap.add_argument("--prefetch", default="0,1", help="K-loop schedules (triton_mma.PREFETCH): 0 and / or 1")
    ap.add_argument("--maxnreg", type=int, default=None)
    ap.add_argument("--ptxas", default=None, help="extra ptxas options (triton_mma.PTXAS_OPTIONS), e.g. --ptxas=-O1")
    ap.add_argument("--bound", default="0", help="0 = fast mode, 1 = the certified deterministic bound; e.g. 0,1")
    args = ap.parse_args()
    if not set(map(int, args.prefetch.split(","))) <= {0, 1}:
        ap.error(f"--prefetch takes 0 and / or 1, got {args.prefetch}")
    for bits in map(int, args.bits.split(",")):
        for nct in map(int, args.nct.split(",")):
            for pf, bound in ((pf, b) for pf in map(int, args.prefetch.split(",")) for b in map(int, args.bound.split(","))):
                try:
                    k, opts = compile_one(bits, nct, pf, args.maxnreg, bound, args.ptxas)
                except Exception as e:  # noqa: BLE001
                    print(f"INT{bits} NCT{nct} prefetch {pf} bound {bound}: FAILED {root_cause(e)}")
                    continue
                res = resource_usage(k)
                reg = int(re.search(r"REG:(\d+)", res).group(1))
                per_sm = min(65536 // (reg * BLOCK), 32 // (BLOCK // 32))
                progs = -(-N // BLOCK)
                body = [op for _, op, _ in loop_body(sass_lines(cuobjdump(k, "-sass")))]
                codes_per_lane = 64 * 32 * (8 // bits) // 32
                hm = sum(o.startswith("HMMA") for o in body)
                ldg = sum(o.startswith("LDG") for o in body)
                print(f"INT{bits} NCT{nct} prefetch {pf} bound {bound} {opts or ''}: {res}  {per_sm} programs/SM -> "
                      f"{progs / (per_sm * SMS):.2f} waves; loop {len(body)} instr ({hm} HMMA, {ldg} LDG) = "
                      f"{len(body) / codes_per_lane:.2f} per code", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
