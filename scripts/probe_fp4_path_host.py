"""Host time of fp4_gemm's re-encode path, launch by launch (why a single cold call can take far
longer than the path's GPU time): for each shape, the median host µs of the re-encoding launch,
fp8_gemm's dispatch, the guarded fused launch and the whole call (no synchronization inside the
timed part), against the cold single-call time and the GPU time of a 4-layer graph.

    python3 scripts/probe_fp4_path_host.py [--shapes 512x24576x1536,4096x7168x2048]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def host_us(fn, reps=30):
    import torch
    out = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    return round(statistics.median(out), 1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default="512x24576x1536,512x7168x16384,4096x7168x2048")
    args = ap.parse_args()
    from lowbit.bench.flags import module_flags
    from lowbit.bench.gemm import _gemm_operands, cold_us
    from lowbit.ops.fp4_gemm import fp4_gemm
    from lowbit.ops.fp4_gemm import triton as tr
    from lowbit.ops.fp8_gemm import triton as fp8_tr
    from scripts.bench_fp4_expand import PATH_OFF, PATH_ON

    for spec in args.shapes.split(","):
        m, n, k = (int(v) for v in spec.split("x"))
        a, _, wq = _gemm_operands(m, n, k, fp4=True)
        q, qs, bad = tr.fp4_weight_to_fp8(wq.packed, wq.scale)
        cfg, aligned = tr.pick_fp4_config(m)
        extra = {"ASM": True, "ALIGNED": aligned, "FAR": True, "GUARD": True, "guard_ptr": bad}
        c = fp8_tr.fp8_gemm(a.data, a.scale, q, qs)
        call = lambda: fp4_gemm(a.data, a.scale, wq.packed, wq.scale)  # noqa: E731
        rec = {"shape": spec,
               "reencode_host_us": host_us(lambda: tr.fp4_weight_to_fp8(wq.packed, wq.scale)),
               "fp8_gemm_host_us": host_us(lambda: fp8_tr.fp8_gemm(a.data, a.scale, q, qs)),
               "guarded_host_us": host_us(lambda: tr.launch_gemm(tr._fp4_gemm_kernel, a.data, a.scale, wq.packed,
                                                                 wq.scale, n, k // 128, extra, 1, cfg, out=c))}
        with module_flags(tr, PATH_ON):
            call()
            rec["path_host_us"] = host_us(call)
            rec["path_cold_us"] = round(cold_us(call), 1)
        with module_flags(tr, PATH_OFF):
            call()
            rec["fused_host_us"] = host_us(call)
            rec["fused_cold_us"] = round(cold_us(call), 1)
        print(rec, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
