"""Why fp8_gemm at M = 64 sits at ~1.33x its byte floor on N7168 K16384 while M = 16 reaches 1.21x.

    python3 scripts/probe_fp8_m64.py            # layer-stack times of the probe variants
    python3 scripts/probe_fp8_m64.py VARIANT    # four launches of one variant (an ncu target)

Variants: the Gluon GEMV at M = 64 (W 4, split 2), the same kernel at M = 16 with a 64-row
activation box (the M = 64 tensor-core work and registers, a quarter of the activation bytes:
rows past M arrive as TMA zero fill) and with its own 16-row box, W 8 at M = 64 capped at 128
registers, the shipped Triton kernel at M = 64 / 16, and per-tensor ``_scaled_mm`` at M = 64.
"""
from __future__ import annotations

import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

N, K = 7168, 16384


def variants():
    from lowbit.ops.fp8_gemm import gluon_wgmma_gemv as g
    from lowbit.ops.fp8_gemm import triton as tr

    def gemv(m, **kw):
        return m, lambda a, wq, t: g.fp8_wgmma_gemv(a.data, a.scale, wq.data, wq.scale, **kw)

    return {
        "gluon_m64_w4s2": gemv(64, config=(4, 2, 4)),
        "gluon_m16_nb64_w4s2": gemv(16, config=(4, 2, 4), nb=64),
        "gluon_m16_w4s2": gemv(16, config=(4, 2, 4)),
        "gluon_m64_nb64_w8s4_r128": gemv(64, config=(3, 4, 8), maxnreg=128),
        "gluon_m32_w4s2": gemv(32, config=(4, 2, 4)),
        "triton_m64": (64, lambda a, wq, t: tr.fp8_gemm(a.data, a.scale, wq.data, wq.scale)),
        "triton_m16_as_m64_tile": (16, lambda a, wq, t: tr.fp8_gemm(a.data, a.scale, wq.data, wq.scale,
                                                                      config=tr.pick_config(64))),
        "scaled_mm_m64": (64, lambda a, wq, t: t()),
    }


def main() -> int:
    import torch

    from lowbit.bench.gemm import decode_layers, gemm_bytes, stack_us
    from lowbit.bench.timing import copy_bandwidth_gbps

    vs = variants()
    if len(sys.argv) > 1:
        m, fn = vs[sys.argv[1]]
        ((a, wq, t, _),) = decode_layers(m, N, K, False, 1)
        for _ in range(4):
            fn(a, wq, t)
        torch.cuda.synchronize()
        return 0
    bw = copy_bandwidth_gbps()
    out = {"copy_gbps": round(bw, 1)}
    for name, (m, fn) in vs.items():
        layers = decode_layers(m, N, K, False, 8)
        us = stack_us([lambda a=a, wq=wq, t=t: fn(a, wq, t) for a, wq, t, _ in layers])
        out[name] = {"us": round(us, 2), "x_floor": round(us / (gemm_bytes(m, N, K, False) / (bw * 1e3)), 3)}
        print(name, json.dumps(out[name]), flush=True)
        del layers
        torch.cuda.empty_cache()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
