"""Same-run A/B of the stream-K FP8 decode GEMV (``lowbit/ops/fp8_gemm/gluon_streamk_gemv.py``) per
config against the shipped ``fp8_gemm`` dispatch and per-tensor / row-wise ``torch._scaled_mm``, on
the benchmark's five (N, K), timed as a layer stack (``lowbit.bench.gemm.stack_us``).

    python3 scripts/bench_fp8_streamk_gemv.py [--ms 1,16,64] [--configs p2s6w4,...] [--json F]

Config spec ``pPsSwW[gG][mM]``: P CTAs an SM, a ring of S units, W warps (16 W weight rows a unit),
G CTAs instead of P an SM, reduction mode M (``gluon_streamk_gemv.MODE``; 2 is a timing probe with
wrong sums, not checked); ``auto`` is the module's rule. Each output is checked against ``fp8_gemm`` (relative error) before timing.
The byte floor is ``gemm_bytes`` / measured copy bandwidth.
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

DEFAULT_CONFIGS = "auto,p1s8w4,p2s6w4,p2s4w4,p3s4w4,p1s4w8,p2s4w8"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--ms", default="1,16,64")
    ap.add_argument("--configs", default=DEFAULT_CONFIGS)
    ap.add_argument("--shapes", default=None, help="N:K,N:K,... (default: the benchmark's five)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    import torch

    from lowbit.bench.gemm import NK, decode_layers, gemm_bytes, stack_us
    from lowbit.bench.timing import copy_bandwidth_gbps
    from lowbit.ops.fp8_gemm import gluon_streamk_gemv as sk
    from lowbit.ops.fp8_gemm import triton as tr

    bw = copy_bandwidth_gbps()
    rows = [{"copy_gbps": round(bw, 1), "layers": args.layers}]
    print(json.dumps(rows[0]), flush=True)
    shapes = NK if args.shapes is None else [tuple(int(v) for v in nk.split(":")) for nk in args.shapes.split(",")]
    for n, k in shapes:
        for m in [int(v) for v in args.ms.split(",")]:
            layers = decode_layers(m, n, k, False, args.layers)
            floor = gemm_bytes(m, n, k, False) / (bw * 1e3)
            rec = {"M": m, "N": n, "K": k, "floor_us": round(floor, 2)}
            fns = {"shipped": [lambda a=a, wq=wq: tr.fp8_gemm(a.data, a.scale, wq.data, wq.scale) for a, wq, _, _ in layers],
                   "rowwise": [r for *_, r in layers], "tensor": [t for _, _, t, _ in layers]}
            a0, wq0 = layers[0][0], layers[0][1]
            ref = tr.fp8_gemm(a0.data, a0.scale, wq0.data, wq0.scale).float()
            for spec in filter(None, args.configs.split(",")):
                kw = {}
                if spec != "auto":
                    p_, s_, w_, g_, m_ = re.fullmatch(r"p(\d+)s(\d+)w(\d+)(?:g(\d+))?(?:m(\d+))?", spec).groups()
                    kw = dict(config=(int(p_), int(s_), int(w_)), grid=int(g_) if g_ else None,
                              mode=int(m_) if m_ else None)
                name = "sk_" + spec
                try:
                    got = sk.fp8_streamk_gemv(a0.data, a0.scale, wq0.data, wq0.scale, **kw).float()
                except Exception as e:  # noqa: BLE001 - e.g. too much shared memory: report, go on
                    rec[name + "_error"] = str(e)[:160]
                    continue
                if kw.get("mode") != 2:
                    rec[name + "_err"] = float(((got - ref).norm() / ref.norm()).item())
                fns[name] = [lambda a=a, wq=wq, kw=kw: sk.fp8_streamk_gemv(a.data, a.scale, wq.data, wq.scale, **kw)
                             for a, wq, _, _ in layers]
            for name, fl in fns.items():
                rec[name + "_us"] = round(stack_us(fl), 2)
            sks = [nm for nm in fns if nm.startswith("sk_") and not nm.endswith("m2")]
            if sks:
                best = min(sks, key=lambda nm: rec[nm + "_us"])
                rec["best"] = best
                rec["best_x_floor"] = round(rec[best + "_us"] / floor, 3)
            rec["shipped_x_floor"] = round(rec["shipped_us"] / floor, 3)
            rec["tensor_x_floor"] = round(rec["tensor_us"] / floor, 3)
            rows.append(rec)
            print(json.dumps(rec), flush=True)
            del layers, fns
            torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
