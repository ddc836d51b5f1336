"""Same-run A/B of the FP8 decode paths: the Gluon wgmma GEMV (``fp8_wgmma_gemv``, per (STAGES,
SPLIT, W) config and its default rule) against the shipped ``fp8_gemm`` dispatch (``mma_gemv`` /
the Triton kernels) and per-tensor / row-wise ``torch._scaled_mm``, on the benchmark's five (N, K),
timed as a layer stack (``lowbit.bench.gemm.stack_us``) and as single calls (``cold_us``).

    python3 scripts/bench_fp8_wgmma_gemv.py [--ms 1,16,64] [--layers 8] [--configs s4x4w8,...] [--json F]

Config spec ``sSxPwW[p][rR]``: a ring of S slots, P K blocks (128 wide) a CTA (SPLIT = ceil(K/128 /
P)), W warps, ``p`` the pipelined schedule, ``rR`` maxnreg R. Each output is checked against
``fp8_gemm`` (relative error) before timing. The byte
floor is ``gemm_bytes`` / measured copy bandwidth.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from scripts.bench_rows import emit_row, save_rows  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--ms", default="1,16,64")
    ap.add_argument("--configs", default="", help="sSxPwW[p][rR],... besides the default rule")
    ap.add_argument("--shapes", default=None, help="N:K,N:K,... (default: the benchmark's five)")
    ap.add_argument("--triton", default="", help="Triton kernel configs too: BM:BN:W:S:swap:tma:split;... "
                    "(GemmConfig fields; split 0 = the launcher's pick)")
    ap.add_argument("--prefill", default="", help="the prefill Gluon kernel (gluon.py) too: BN:STAGES:WS[:W];... "
                    "(BLOCK_M = 16 W, W = 4 by default; WS 1 = warp-specialized; persistent)")
    ap.add_argument("--no-single", action="store_true", help="stack timer only")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    import torch

    from lowbit.bench.gemm import NK, cold_us, decode_layers, gemm_bytes, stack_us
    from lowbit.bench.timing import copy_bandwidth_gbps
    from lowbit.ops.fp8_gemm import gluon_wgmma_gemv as g
    from lowbit.ops.fp8_gemm import triton as tr

    bw = copy_bandwidth_gbps()
    rows = [{"copy_gbps": round(bw, 1), "layers": args.layers}]
    print(json.dumps(rows[0]), flush=True)
    shapes = NK if args.shapes is None else [tuple(int(v) for v in nk.split(":")) for nk in args.shapes.split(",")]
    for n, k in shapes:
        for m in [int(v) for v in args.ms.split(",")]:
            layers = decode_layers(m, n, k, False, args.layers)
            auto = g.pick_fp8_wgmma_gemv_config(n, k, m, torch.cuda.get_device_properties(0).multi_processor_count)
            cfgs = [(None, None, None)]
            for spec in filter(None, args.configs.split(",")):
                s_, p_, w_, pipe, reg = re.fullmatch(r"s(\d+)x(\d+)w(\d+)(p)?(?:r(\d+))?", spec).groups()
                cfg = ((int(s_), -(-(k // 128) // int(p_)), int(w_)), bool(pipe), int(reg) if reg else None)
                if cfg not in cfgs:
                    cfgs.append(cfg)
            rec = {"M": m, "N": n, "K": k, "floor_us": round(gemm_bytes(m, n, k, False) / (bw * 1e3), 2),
                   "auto": list(auto)}
            fns = {"shipped": [lambda a=a, wq=wq: tr.fp8_gemm(a.data, a.scale, wq.data, wq.scale) for a, wq, _, _ in layers],
                   "rowwise": [r for *_, r in layers], "tensor": [t for _, _, t, _ in layers]}
            a0, wq0 = layers[0][0], layers[0][1]
            ref = tr.fp8_gemm(a0.data, a0.scale, wq0.data, wq0.scale).float()
            for cfg, pipe, reg in cfgs:
                name = ("gemv_auto" if cfg is None else f"gemv_s{cfg[0]}_split{cfg[1]}_w{cfg[2]}"
                        + ("_pipe" if pipe else "") + (f"_r{reg}" if reg else ""))
                kw = dict(config=cfg, pipe=pipe if cfg is not None else None, maxnreg=reg)
                got = g.fp8_wgmma_gemv(a0.data, a0.scale, wq0.data, wq0.scale, **kw).float()
                rec[name + "_err"] = float(((got - ref).norm() / ref.norm()).item())
                fns[name] = [lambda a=a, wq=wq, kw=kw: g.fp8_wgmma_gemv(a.data, a.scale, wq.data, wq.scale, **kw)
                             for a, wq, _, _ in layers]
            for spec in filter(None, args.triton.split(";")):
                bm, bn, nw, st, swap, tma, sk = (int(v) for v in spec.split(":"))
                tcfg = tr.GemmConfig(bm, bn, nw, st, bool(swap), 8, bool(tma))
                kw = dict(config=tcfg, split_k=sk or None)
                name = f"triton_{bm}x{bn}_w{nw}_s{st}" + ("_swap" if swap else "") + ("_tma" if tma else "") + f"_k{sk}"
                got = tr.fp8_gemm(a0.data, a0.scale, wq0.data, wq0.scale, **kw).float()
                rec[name + "_err"] = float(((got - ref).norm() / ref.norm()).item())
                fns[name] = [lambda a=a, wq=wq, kw=kw: tr.fp8_gemm(a.data, a.scale, wq.data, wq.scale, **kw)
                             for a, wq, _, _ in layers]
            for spec in filter(None, args.prefill.split(";")):
                from lowbit.ops.fp8_gemm.gluon import fp8_gemm_gluon

                bn, st, ws, nw = ([int(v) for v in spec.split(":")] + [4])[:4]
                kw = dict(block_m=16 * nw, block_n=bn, stages=st, warp_specialize=bool(ws), num_warps=nw)
                name = f"prefill_{16 * nw}x{bn}_s{st}" + ("_ws" if ws else "")
                try:
                    got = fp8_gemm_gluon(a0.data, a0.scale, wq0.data, wq0.scale, **kw).float()
                except Exception as e:  # noqa: BLE001 - e.g. too much shared memory: report, go on
                    rec[name + "_error"] = str(e)[:160]
                    continue
                rec[name + "_err"] = float(((got - ref).norm() / ref.norm()).item())
                fns[name] = [lambda a=a, wq=wq, kw=kw: fp8_gemm_gluon(a.data, a.scale, wq.data, wq.scale, **kw)
                             for a, wq, _, _ in layers]
            for name, fl in fns.items():
                rec[name + "_stack_us"] = round(stack_us(fl), 2)
                if not args.no_single:
                    rec[name + "_single_us"] = round(cold_us(fl[0], graph=True), 2)
            best = min((nm for nm in fns if nm.startswith("gemv")), key=lambda nm: rec[nm + "_stack_us"])
            rec["best"] = best
            rec["best_vs_floor_stack"] = round(rec[best + "_stack_us"] / rec["floor_us"], 3)
            rec["auto_vs_floor_stack"] = round(rec["gemv_auto_stack_us"] / rec["floor_us"], 3)
            rec["shipped_vs_floor_stack"] = round(rec["shipped_stack_us"] / rec["floor_us"], 3)
            emit_row(rows, rec)
            del layers, fns
            torch.cuda.empty_cache()
    save_rows(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
