"""Same-run A/B of programmatic dependent launch (PDL) for fp8_gemm's M = 33..64 Gluon kernel
(``DECODE_GLUON_CONFIG``): layer stack (``lowbit.bench.gemm.stack_us``) without PDL, with it, and
with the next launch triggered early, against per-tensor and row-wise ``torch._scaled_mm`` and the
byte floor.

    python3 scripts/bench_decode_pdl.py [--ms 64] [--shapes 7168:16384,7168:2048] [--json F]
"""
from __future__ import annotations

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from scripts.bench_rows import emit_row, save_rows  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--ms", default="64")
    ap.add_argument("--shapes", default="7168:16384,7168:2048")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    import torch

    from lowbit.bench.gemm import decode_layers, gemm_bytes, stack_us
    from lowbit.bench.timing import copy_bandwidth_gbps
    from lowbit.ops.fp8_gemm.gluon import fp8_gemm_gluon
    from lowbit.ops.fp8_gemm.triton import DECODE_GLUON_CONFIG

    bw = copy_bandwidth_gbps()
    rows = [{"copy_gbps": round(bw, 1), "layers": args.layers}]
    print(json.dumps(rows[0]), flush=True)
    for nk in args.shapes.split(","):
        n, k = (int(v) for v in nk.split(":"))
        for m in (int(v) for v in args.ms.split(",")):
            layers = decode_layers(m, n, k, False, args.layers)
            cfg = dict(DECODE_GLUON_CONFIG)
            cfg["stages"] = max(2, min(cfg["stages"], k // 128))
            cfg.pop("pdl", None)  # both ways below
            rec = {"M": m, "N": n, "K": k, "floor_us": round(gemm_bytes(m, n, k, False) / (bw * 1e3), 2)}
            a0, w0 = layers[0][0], layers[0][1]
            base = fp8_gemm_gluon(a0.data, a0.scale, w0.data, w0.scale, **cfg)
            rec["pdl_bit_identical"] = all(
                bool(torch.equal(base, fp8_gemm_gluon(a0.data, a0.scale, w0.data, w0.scale, pdl=True, trigger=tr, **cfg)))
                for tr in (False, True))
            fns = {"tensor": [t for _, _, t, _ in layers], "rowwise": [r for *_, r in layers]}
            for name, kw in (("gluon", {}), ("gluon_pdl", dict(pdl=True, trigger=False)),
                             ("gluon_pdl_tr", dict(pdl=True, trigger=True))):
                fns[name] = [lambda a=a, w=w, kw=kw: fp8_gemm_gluon(a.data, a.scale, w.data, w.scale, **kw, **cfg)
                             for a, w, _, _ in layers]
            for _ in range(2):  # two rounds, interleaved: the spread is the noise
                for name, fl in fns.items():
                    rec.setdefault(name + "_stack_us", []).append(round(stack_us(fl), 2))
            for name in fns:
                rec[name + "_x_floor"] = round(min(rec[name + "_stack_us"]) / rec["floor_us"], 3)
            emit_row(rows, rec)
            del layers, fns
            torch.cuda.empty_cache()
    save_rows(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
