"""Check and time the Gluon ``fp8_gemm`` prefill kernels on an sm_90 GPU (H200).

Run from the repository root: ``PYTHONPATH=$PWD python scripts/try_fp8_gluon.py [--out DIR]
[--no-sweep] [--jobs gluon,gluon_ws,...]``. Needs only torch and triton; about 2-3 minutes.

Variants of ``lowbit.ops.fp8_gemm.gluon.fp8_gemm_gluon``: ``gluon`` (default: persistent
single-partition kernel), ``gluon_1tile`` (``persistent=False``: one program per tile) and
``gluon_ws`` (``warp_specialize=True``: 1-warp TMA producer partition). Each variant runs in its
own subprocess with a timeout, so a hang or a device fault in one does not take the others
down; a ``baselines`` subprocess times the current Triton kernel and cuBLAS.

1. Correctness, every shape: random e4m3 A / B (``randn * 0.5``), fp32 scales ``rand + 0.5``
   (and two UE8M0-scale cases); the output (pre-filled with NaN, so an unwritten element fails)
   against ``lowbit.ops.fp8_gemm.reference.fp8_gemm_ref``: max |out - ref| / max |ref|, FAIL
   above 1e-2 (both are bf16-rounded: one bf16 ulp at the maximum is 0.4-0.8e-2).
2. Timing (M = 4096 and 512 shapes), ``triton.testing.do_bench(rep=100, median)``: the Gluon
   variants, the current Triton kernel ``lowbit.ops.fp8_gemm.triton.fp8_gemm`` and cuBLAS
   per-tensor FP8 ``torch._scaled_mm`` (scales = 1): us, TFLOP/s, ratios to ``_scaled_mm``.
3. Sweep (M = 4096 shapes; ``gluon`` and ``gluon_ws``): stages {3, 4, 5} x group_m {8, 16}, the
   best per shape.

``--out DIR`` writes ``DIR/try_fp8_gluon.json`` (all rows, merged).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback

# the repository root, for ``lowbit`` without PYTHONPATH (the child jobs run this file too)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SHAPES = [(4096, 7168, 16384), (4096, 4096, 7168), (4096, 2112, 7168), (4096, 24576, 1536), (4096, 7168, 2048),
          (512, 7168, 16384), (130, 2112, 7168), (17, 256, 512)]
E8M0_CASES = [(130, 2112, 7168), (4096, 4096, 7168)]
TIMED_M = (4096, 512)
SWEEP = [(st, g) for st in (3, 4, 5) for g in (8, 16)]
SWEEP_JOBS = ("gluon", "gluon_ws")
TOL = 1e-2
VARIANTS = {"gluon": {}, "gluon_1tile": dict(persistent=False), "gluon_ws": dict(warp_specialize=True)}
JOBS = ("baselines", *VARIANTS)
TIMEOUT_S = {"baselines": 60, "gluon": 120, "gluon_1tile": 60, "gluon_ws": 120}  # a hang costs at most this


def make_inputs(m: int, n: int, k: int, e8m0: bool = False, seed: int = 0):
    """a e4m3 [M, K], a_s [M, K/128], b e4m3 [N, K], b_s [ceil(N/128), K/128] on the GPU."""
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    a = (torch.randn((m, k), device="cuda", generator=g) * 0.5).to(torch.float8_e4m3fn)
    b = (torch.randn((n, k), device="cuda", generator=g) * 0.5).to(torch.float8_e4m3fn)
    a_s = torch.rand((m, k // 128), device="cuda", generator=g) + 0.5
    b_s = torch.rand((-(-n // 128), k // 128), device="cuda", generator=g) + 0.5
    if e8m0:  # powers of two 2^-2 .. 2^1 as UE8M0 bytes
        a_s = torch.randint(125, 129, a_s.shape, device="cuda", generator=g).to(torch.uint8).view(torch.float8_e8m0fnu)
        b_s = torch.randint(125, 129, b_s.shape, device="cuda", generator=g).to(torch.uint8).view(torch.float8_e8m0fnu)
    return a, a_s, b, b_s


def rel_err(out, ref) -> float:
    """max |out - ref| / max |ref| (a NaN or inf anywhere in out -> inf)."""
    import torch

    o, r = out.float(), ref.float()
    if not torch.isfinite(o).all():
        return float("inf")
    return ((o - r).abs().max() / r.abs().max().clamp_min(1e-30)).item()


def bench(fn) -> float:
    """Median microseconds of fn (triton.testing.do_bench, rep=100 ms)."""
    import triton

    return triton.testing.do_bench(fn, rep=100, return_mode="median") * 1e3


def _err(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"[:400]


# ------------------------------------------------------------------------------ one job (subprocess)
def run_job(job: str, sweep: bool, path: str) -> int:
    """Run one job, writing its rows to ``path`` after every step (a later hang keeps them)."""
    import torch

    # e4m3 values (4 significant bits) and their products are exact in TF32, so the reference's
    # fp32 matmuls may use TF32 tensor cores: same result up to fp32 summation order, much faster.
    torch.backends.cuda.matmul.allow_tf32 = True
    res: dict = dict(job=job, checks=[], timing=[], sweep=[])

    def save():
        with open(path, "w") as f:
            json.dump(res, f, default=str)

    if job == "baselines":
        from lowbit.ops.fp8_gemm.triton import fp8_gemm as triton_fp8_gemm

        one = torch.ones((), device="cuda")
        for m, n, k in SHAPES:
            if m not in TIMED_M:
                continue
            a, a_s, b, b_s = make_inputs(m, n, k)
            fns = dict(triton=lambda: triton_fp8_gemm(a, a_s, b, b_s),
                       scaled_mm=lambda: torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
            for name, fn in fns.items():
                row = dict(m=m, n=n, k=k, impl=name)
                try:
                    row["us"] = bench(fn)
                except Exception as e:  # noqa: BLE001
                    row["error"] = _err(e)
                res["timing"].append(row)
                print(f"  [{job}] M{m} N{n} K{k} {name}: " + (f"{row['us']:.1f} us" if "us" in row else row["error"]),
                      flush=True)
                save()
            del a, a_s, b, b_s
            torch.cuda.empty_cache()
        return 0

    from lowbit.ops.fp8_gemm import gluon as G
    from lowbit.ops.fp8_gemm.reference import fp8_gemm_ref

    if not G.gluon_available():
        print(f"  [{job}] gluon is not available (import failed or no sm_90+ GPU)", flush=True)
        return 1
    cfg = VARIANTS[job]
    failed = False
    for (m, n, k), e8m0 in [(s, False) for s in SHAPES] + [(s, True) for s in E8M0_CASES]:
        row = dict(m=m, n=n, k=k, e8m0=e8m0, impl=job)
        try:
            a, a_s, b, b_s = make_inputs(m, n, k, e8m0)
            out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
            G.fp8_gemm_gluon(a, a_s, b, b_s, out=out, **cfg)
            torch.cuda.synchronize()
            row["rel_err"] = rel_err(out, fp8_gemm_ref(a, a_s, b, b_s))
            row["ok"] = row["rel_err"] <= TOL
            del a, a_s, b, b_s, out
        except Exception as e:  # noqa: BLE001
            row.update(ok=False, error=_err(e))
            traceback.print_exc(limit=4)
        failed |= not row["ok"]
        res["checks"].append(row)
        print(f"  [{job}] check M{m} N{n} K{k} {'ue8m0' if e8m0 else 'fp32'}: "
              + (f"rel err {row['rel_err']:.2e} {'ok' if row['ok'] else 'FAIL'}" if "rel_err" in row else row["error"]),
              flush=True)
        save()
        torch.cuda.empty_cache()

    for m, n, k in SHAPES:
        if m not in TIMED_M:
            continue
        a, a_s, b, b_s = make_inputs(m, n, k)
        row = dict(m=m, n=n, k=k, impl=job)
        try:
            row["us"] = bench(lambda: G.fp8_gemm_gluon(a, a_s, b, b_s, **cfg))
        except Exception as e:  # noqa: BLE001
            row["error"] = _err(e)
        res["timing"].append(row)
        print(f"  [{job}] M{m} N{n} K{k}: " + (f"{row['us']:.1f} us" if "us" in row else row["error"]), flush=True)
        save()
        if sweep and job in SWEEP_JOBS and m == 4096:
            for st, gm in SWEEP:
                srow = dict(m=m, n=n, k=k, impl=job, stages=st, group_m=gm)
                try:
                    srow["us"] = bench(lambda: G.fp8_gemm_gluon(a, a_s, b, b_s, **dict(cfg, stages=st, group_m=gm)))
                except Exception as e:  # noqa: BLE001
                    srow["error"] = _err(e)
                res["sweep"].append(srow)
            print(f"  [{job}] sweep M{m} N{n} K{k}: " + "  ".join(
                f"s{r['stages']}g{r['group_m']} " + (f"{r['us']:.1f}" if "us" in r else "error")
                for r in res["sweep"] if (r["m"], r["n"], r["k"]) == (m, n, k)), flush=True)
            save()
        del a, a_s, b, b_s
        torch.cuda.empty_cache()
    return 1 if failed else 0


# ---------------------------------------------------------------------------------- orchestration
def summary(results: dict) -> dict:
    """Print the merged tables; returns the merged rows."""
    timing = [r for res in results.values() for r in res.get("timing", [])]
    checks = [r for res in results.values() for r in res.get("checks", [])]
    sweep = [r for res in results.values() for r in res.get("sweep", [])]
    impls = [j for j in (*VARIANTS, "triton", "scaled_mm") if any(r["impl"] == j for r in timing)]

    print("\n== correctness: max |out - ref| / max |ref| (FAIL > 1e-2; output pre-filled with NaN)")
    for (m, n, k), e8m0 in [(s, False) for s in SHAPES] + [(s, True) for s in E8M0_CASES]:
        cells = []
        for j in VARIANTS:
            r = next((x for x in checks if (x["m"], x["n"], x["k"], x["e8m0"], x["impl"]) == (m, n, k, e8m0, j)), None)
            if r is None:
                cells.append(f"{j} -")
            elif "rel_err" in r:
                cells.append(f"{j} {r['rel_err']:.2e} {'ok' if r['ok'] else 'FAIL'}")
            else:
                cells.append(f"{j} ERROR")
        print(f"  M{m:5d} N{n:6d} K{k:6d} {'ue8m0' if e8m0 else 'fp32 '}  " + "  ".join(cells))

    print("\n== timing: us (TFLOP/s); ratio = _scaled_mm time / impl time")
    print("  " + "shape".ljust(22) + "".join(f"{j:>17s}" for j in impls)
          + "".join(f"{j[:10] + '/sm':>14s}" for j in impls if j != "scaled_mm"))
    for m, n, k in SHAPES:
        if m not in TIMED_M:
            continue
        us = {j: next((r.get("us") for r in timing if (r["m"], r["n"], r["k"], r["impl"]) == (m, n, k, j)), None)
              for j in impls}
        fl = 2.0 * m * n * k
        line = "  " + f"M{m} N{n} K{k}".ljust(22)
        line += "".join(f"{us[j]:9.1f} ({fl / us[j] * 1e-6:4.0f})" if us[j] else f"{'-':>17s}" for j in impls)
        sm = us.get("scaled_mm")
        line += "".join(f"{sm / us[j]:14.3f}" if sm and us[j] else f"{'-':>14s}" for j in impls if j != "scaled_mm")
        print(line)

    if sweep:
        print("\n== sweep (M = 4096): best stages / group_m per shape")
        for m, n, k in SHAPES:
            for j in SWEEP_JOBS:
                rows = [r for r in sweep if (r["m"], r["n"], r["k"], r["impl"]) == (m, n, k, j) and "us" in r]
                if not rows:
                    continue
                best = min(rows, key=lambda r: r["us"])
                sm = next((r.get("us") for r in timing if (r["m"], r["n"], r["k"], r["impl"]) == (m, n, k, "scaled_mm")),
                          None)
                print(f"  M{m} N{n} K{k} {j}: stages {best['stages']} group_m {best['group_m']} {best['us']:.1f} us"
                      + (f" = {sm / best['us']:.3f}x _scaled_mm" if sm else "")
                      + "   [" + " ".join(f"s{r['stages']}g{r['group_m']}:{r['us']:.0f}" for r in rows) + "]")
    return dict(checks=checks, timing=timing, sweep=sweep)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=None, help="folder for try_fp8_gluon.json")
    ap.add_argument("--no-sweep", action="store_true", help="skip the stages x group_m sweep")
    ap.add_argument("--jobs", default=",".join(JOBS), help=f"comma-separated subset of {','.join(JOBS)}")
    ap.add_argument("--job", default=None, help=argparse.SUPPRESS)  # child mode
    ap.add_argument("--json", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.job:
        return run_job(args.job, not args.no_sweep, args.json)

    t0 = time.monotonic()
    import torch
    import triton

    info = dict(device=torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
                torch=torch.__version__, triton=triton.__version__)
    print(f"device {info['device']}  torch {info['torch']}  triton {info['triton']}", flush=True)
    results, status = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for job in [j.strip() for j in args.jobs.split(",") if j.strip()]:
            if job not in JOBS:
                print(f"unknown job {job!r}; expected one of {JOBS}")
                return 2
            path = os.path.join(tmp, f"{job}.json")
            cmd = [sys.executable, os.path.abspath(__file__), "--job", job, "--json", path]
            if args.no_sweep:
                cmd.append("--no-sweep")
            t = time.monotonic()
            print(f"\n-- {job} (timeout {TIMEOUT_S[job]} s)", flush=True)
            try:
                rc = subprocess.run(cmd, timeout=TIMEOUT_S[job]).returncode
                status[job] = "ok" if rc == 0 else f"exit {rc}"
            except subprocess.TimeoutExpired:
                status[job] = f"TIMEOUT after {TIMEOUT_S[job]} s (hang?)"
            if os.path.exists(path):
                with open(path) as f:
                    results[job] = json.load(f)
            print(f"-- {job}: {status[job]} ({time.monotonic() - t:.0f} s)", flush=True)
    merged = summary(results)
    failed = any(not r.get("ok", False) for r in merged["checks"]) or any(v != "ok" for v in status.values())
    print(f"\njobs: {status}")
    print(f"{'all checks ok' if not failed else 'SOME CHECKS OR JOBS FAILED'}  ({time.monotonic() - t0:.0f} s)")
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "try_fp8_gluon.json"), "w") as f:
            json.dump(dict(info, status=status, **merged, wall_s=time.monotonic() - t0), f, indent=1, default=str)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
