"""Check and time the split-K Gluon ``fp8_gemm`` decode kernel (``fp8_gemm_gluon_decode``) on an
H200, against the current dispatch and cuBLAS in the same run.

Run from the repository root: ``PYTHONPATH=$PWD python scripts/try_fp8_decode_gluon.py [--out DIR]
[--configs 0,3,5]``. Each config runs in its own subprocess with a timeout (a hang or a device
fault in one leaves the others), as ``scripts/try_fp8_gluon.py`` does.

1. Correctness per config: random e4m3 operands and fp32 / UE8M0 scales (``try_fp8_gluon.make_inputs``)
   on edge shapes (M 1 / 17 / 64, N not a multiple of the tile, K of one block), the output
   pre-filled with NaN, against ``fp8_gemm_ref``: max |out - ref| / max |ref| <= 1e-2.
2. Timing: ``lowbit.bench.gemm.cold_us(graph=True)`` (L2 flushed by reading, CUDA-graph replay:
   the benchmark's own timer) at M = 32 / 64 on the five benchmark shapes and M = 16 on
   N7168 K16384; the ``baselines`` job times the public ``fp8_gemm`` (today's dispatch) and
   ``torch._scaled_mm`` per-tensor / row-wise on the same shapes, and the byte floor
   (weight + activation + scales + output at the measured copy bandwidth).

``--out DIR`` writes ``DIR/try_fp8_decode_gluon.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

NK = [(2112, 7168), (24576, 1536), (7168, 16384), (4096, 7168), (7168, 2048)]
TIMED = [(m, n, k) for m in (64, 32) for n, k in NK] + [(16, 7168, 16384)]
CHECKS = [(64, 7168, 16384, False), (17, 2112, 7168, False), (1, 256, 512, False), (64, 7170, 1536, True),
          (33, 24576, 1536, False), (40, 300, 128, True)]
# (block_n, stages, waves, split_k, maxnreg)
CONFIGS = [
    (128, 4, 2, None, None), (64, 4, 2, None, None), (64, 6, 2, None, None), (128, 6, 2, None, None),
    (64, 4, 2, None, 128), (64, 6, 3, None, 128), (128, 4, None, 4, None), (128, 4, None, 8, None),
    (64, 4, None, 2, None), (64, 8, None, 4, 128), (128, 3, 4, None, None),
]
TIMEOUT_S = 90


def _kwargs(cfg) -> dict:
    block_n, stages, waves, split_k, maxnreg = cfg
    kw = dict(block_n=block_n, stages=stages, maxnreg=maxnreg)
    if split_k is not None:
        kw["split_k"] = split_k
    else:
        kw["waves"] = waves
    return kw


def run_child(job: str, path: str) -> None:
    import torch

    from lowbit.bench.gemm import cold_us
    from lowbit.ops.fp8_gemm.reference import fp8_gemm_ref
    from try_fp8_gluon import make_inputs, rel_err

    torch.backends.cuda.matmul.allow_tf32 = True
    res: dict = dict(job=job, checks=[], timing=[])

    def save():
        with open(path, "w") as f:
            json.dump(res, f, default=str)

    if job == "baselines":
        from lowbit.bench.timing import copy_bandwidth_gbps
        from lowbit.ops import fp8_gemm

        gbps = copy_bandwidth_gbps()
        res["copy_gbps"] = gbps
        for m, n, k in TIMED:
            a, a_s, b, b_s = make_inputs(m, n, k)
            one = torch.ones((), device="cuda")
            sa = torch.ones((m, 1), device="cuda")
            sb = torch.ones((1, n), device="cuda")
            nbytes = n * k + m * k + 4 * (m * k // 128 + (-(-n // 128)) * (k // 128)) + 2 * m * n
            row = dict(m=m, n=n, k=k, floor_us=nbytes / (gbps * 1e3),
                       fp8_gemm=cold_us(lambda: fp8_gemm(a, a_s, b, b_s), graph=True),
                       scaled_mm_tensor=cold_us(lambda: torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one,
                                                                         out_dtype=torch.bfloat16), graph=True),
                       scaled_mm_rowwise=cold_us(lambda: torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb,
                                                                          out_dtype=torch.bfloat16), graph=True))
            res["timing"].append(row)
            save()
        return
    from lowbit.ops.fp8_gemm.gluon import fp8_gemm_gluon_decode

    cfg = CONFIGS[int(job)]
    res["config"] = cfg
    kw = _kwargs(cfg)
    for m, n, k, e8m0 in CHECKS:
        a, a_s, b, b_s = make_inputs(m, n, k, e8m0=e8m0, seed=m + n)
        out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        fp8_gemm_gluon_decode(a, a_s, b, b_s, out=out, **kw)
        err = rel_err(out, fp8_gemm_ref(a, a_s, b, b_s))
        res["checks"].append(dict(m=m, n=n, k=k, e8m0=e8m0, rel_err=err, ok=err <= 1e-2))
        save()
    for m, n, k in TIMED:
        a, a_s, b, b_s = make_inputs(m, n, k)
        res["timing"].append(dict(m=m, n=n, k=k, us=cold_us(lambda: fp8_gemm_gluon_decode(a, a_s, b, b_s, **kw),
                                                              graph=True)))
        save()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--configs", default=",".join(str(i) for i in range(len(CONFIGS))))
    ap.add_argument("--job", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--json", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.job is not None:
        run_child(args.job, args.json)
        return 0
    results = {}
    t0 = time.monotonic()
    for job in ["baselines", *args.configs.split(",")]:
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
            path = f.name
        t = time.monotonic()
        try:
            r = subprocess.run([sys.executable, __file__, "--job", job, "--json", path], timeout=TIMEOUT_S,
                               capture_output=True, text=True)
            status = "ok" if r.returncode == 0 else f"rc {r.returncode}: {r.stderr[-600:]}"
        except subprocess.TimeoutExpired:
            status = f"timeout after {TIMEOUT_S} s"
        try:
            with open(path) as f:
                results[job] = json.load(f)
        except (OSError, ValueError):
            results[job] = {}
        results[job]["status"] = status
        print(f"job {job}: {status} ({time.monotonic() - t:.0f} s)", flush=True)
    base = {(r["m"], r["n"], r["k"]): r for r in results.get("baselines", {}).get("timing", [])}
    failed = False
    for job, r in results.items():
        if job == "baselines":
            continue
        bad = [c for c in r.get("checks", []) if not c["ok"]]
        failed |= bool(bad) or r["status"] != "ok"
        print(f"config {job} {r.get('config')}: {r['status']}, checks {len(r.get('checks', [])) - len(bad)}/"
              f"{len(CHECKS)} ok {bad if bad else ''}")
        for t in r.get("timing", []):
            b = base.get((t["m"], t["n"], t["k"]))
            extra = (f" | now {b['fp8_gemm']:.1f}  tensor {b['scaled_mm_tensor']:.1f}  rowwise "
                     f"{b['scaled_mm_rowwise']:.1f}  floor {b['floor_us']:.1f} -> {t['us'] / b['floor_us']:.2f}x floor, "
                     f"{b['fp8_gemm'] / t['us']:.2f}x now" if b else "")
            print(f"   M{t['m']} N{t['n']} K{t['k']}: {t['us']:.1f} us{extra}")
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "try_fp8_decode_gluon.json"), "w") as f:
            json.dump(results, f, indent=1, default=str)
    print(f"{'all checks ok' if not failed else 'SOME CHECKS OR JOBS FAILED'} ({time.monotonic() - t0:.0f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
