"""Tune the tiled GEMM kernels' launch tables (``tiled.CONFIGS`` of ``fp8_gemm`` and ``fp4_gemm``) on a
GPU: ``lowbit tune fp8_gemm`` (``lowbit tune fp4_gemm``: the FP4 bands only).

1. worker processes compile every candidate launch config once (Triton's disk cache then serves
   the timing phase) and check its output against an fp32 reference of the dequantized operands
   on the band's shapes (``rel err < 2^-8``);
2. every correct candidate is timed per M band on a subset of the benchmark shapes (cold L2,
   CUDA-graph replay for M <= 64: ``lowbit.bench.gemm.cold_us``), with the ``_scaled_mm`` /
   ``F.linear`` baselines on the same shapes, and the best config per band (the lowest geometric
   mean time) is printed;
3. the best configs are installed in-process and the ``fp8_gemm`` / ``fp4_gemm`` benchmarks of
   ``lowbit/bench/gemm.py`` run (all shapes, baselines in the same run) while the budget lasts.

Everything lands in ``$OUT/tune.json`` (``--out``); the whole run is bounded by ``--budget``
seconds. Copy the chosen configs into the ``CONFIGS`` tables by hand. ``--smoke`` runs the check
path on CPU under the Triton interpreter (tiny shapes, a few candidates).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import traceback

from lowbit.ops.fp8_gemm.tiled import GemmConfig as C

__all__ = ["main"]

DEC_SHAPES = [(7168, 16384), (2112, 7168), (24576, 1536)]
# band -> M values timed, (N, K) shapes, candidates (the table's config among them). fp4 candidates
# are (config, step): "four-dot" (four 32-wide dots a 128 block, swap-AB only) or "aligned".
FP8_BANDS = {
    "m<=16": dict(ms=(1, 16), shapes=DEC_SHAPES, cfgs=[
        C(16, 64, 4, 5, True), C(16, 64, 4, 6, True), C(16, 64, 4, 8, True), C(16, 128, 4, 4, True), C(16, 128, 4, 6, True),
        C(16, 128, 8, 4, True), C(16, 64, 4, 6, True, waves=4), C(16, 128, 4, 6, True, waves=4),
        C(16, 256, 8, 4, True), C(16, 64, 4, 6, True, waves=3), C(16, 64, 4, 4, True)]),
    "m<=64": dict(ms=(64,), shapes=DEC_SHAPES, cfgs=[
        C(64, 64, 4, 3, False), C(64, 64, 4, 5, True), C(64, 128, 4, 4, True), C(64, 128, 8, 4, True), C(64, 64, 4, 6, True),
        C(64, 128, 4, 4, False), C(64, 128, 4, 6, True), C(64, 64, 4, 5, True, waves=4),
        C(64, 128, 4, 5, False), C(64, 128, 4, 6, False), C(64, 64, 4, 4, False), C(64, 256, 8, 4, False),
        C(64, 128, 4, 4, False, waves=4), C(64, 128, 8, 4, False),
        C(64, 64, 4, 5, False), C(64, 64, 4, 6, False), C(64, 32, 4, 4, False),
        C(64, 64, 4, 4, False, waves=4), C(64, 64, 4, 4, False, waves=1), C(64, 64, 8, 4, False), C(64, 32, 4, 6, False)]),
    "m<=1024": dict(ms=(512,), shapes=[(7168, 16384), (2112, 7168), (4096, 7168)], cfgs=[
        C(128, 128, 8, 4, False), C(64, 128, 4, 4, False), C(128, 128, 8, 4, False, 8, True),
        C(128, 128, 8, 3, False, 8, True, waves=1), C(64, 256, 8, 3, False, 8, True), C(64, 128, 4, 4, False, 8, True)]),
    "m>1024": dict(ms=(4096,), shapes=[(7168, 16384), (4096, 7168), (24576, 1536)], cfgs=[
        C(128, 128, 8, 4, False, 16, True), C(128, 128, 8, 4, False), C(128, 128, 8, 4, False, 8, True), C(128, 128, 8, 5, False, 8, True),
        C(128, 128, 8, 3, False, 8, True), C(256, 128, 16, 3, False, 8, True), C(64, 256, 8, 4, False, 8, True),
        C(128, 128, 8, 4, False, 4, True),
        # one-warpgroup tiles: fewer registers per CTA, so 2-3 CTAs per SM overlap one CTA's
        # scale-FMA phase (the dot must complete before it) with another's wgmma
        C(128, 64, 4, 4, False, 16, True), C(128, 64, 4, 6, False, 16, True), C(64, 128, 4, 5, False, 16, True),
        C(128, 128, 8, 5, False, 16, True, waves=1)]),
}
FP4_BANDS = {
    "m<=16": dict(ms=(1, 16), shapes=DEC_SHAPES, cfgs=[
        (C(16, 64, 4, 4, True), "four-dot"), (C(16, 64, 4, 4, True), "aligned"), (C(16, 128, 4, 4, True), "aligned"),
        (C(16, 64, 4, 6, True), "aligned"), (C(16, 128, 4, 6, True), "aligned"), (C(16, 128, 8, 4, True), "aligned"),
        (C(16, 256, 8, 3, True), "aligned"), (C(16, 64, 4, 4, True, waves=4), "aligned"),
        (C(16, 128, 4, 4, True, waves=4), "aligned"),
        # not swapped: the decoded weight is the wgmma B operand via shared memory
        (C(16, 64, 4, 4, False), "aligned"), (C(16, 128, 4, 4, False), "aligned"), (C(64, 128, 4, 4, False), "aligned"),
        (C(16, 64, 4, 6, False), "aligned"), (C(64, 64, 4, 4, False), "aligned"), (C(16, 256, 8, 4, False), "aligned")]),
    "m<=64": dict(ms=(64,), shapes=DEC_SHAPES, cfgs=[
        (C(64, 64, 4, 4, True), "four-dot"), (C(64, 64, 4, 4, True), "aligned"), (C(64, 128, 4, 4, True), "aligned"),
        (C(64, 128, 8, 3, True), "aligned"), (C(64, 64, 4, 6, True), "aligned"), (C(64, 128, 8, 4, True), "aligned"),
        (C(64, 128, 4, 4, False), "aligned"), (C(64, 64, 4, 4, False), "aligned"), (C(64, 256, 8, 3, False), "aligned")]),
    "m>64": dict(ms=(4096,), shapes=[(4096, 7168), (7168, 2048)], cfgs=[
        (C(128, 64, 4, 4, False), "aligned"), (C(128, 128, 8, 3, True), "four-dot"), (C(128, 128, 8, 3, True), "aligned"),
        (C(64, 128, 8, 3, True), "aligned"), (C(128, 128, 8, 4, True), "aligned"), (C(128, 256, 8, 3, True), "aligned"),
        (C(64, 256, 8, 3, True), "aligned"), (C(128, 128, 4, 3, True), "aligned"), (C(128, 128, 8, 3, False), "aligned"),
        (C(64, 128, 4, 4, False), "aligned"), (C(128, 256, 8, 3, False), "aligned"),
        (C(128, 128, 8, 4, False, 16), "aligned")]),
}
TOL = 2.0**-8

T0 = time.monotonic()
ONLY = os.environ.get("TUNE_GEMM_ONLY") or None  # "fp8" / "fp4": sweep one op (workers read it from the env too)
DEVICE = "cuda"  # "cpu" (Triton interpreter, tiny shapes) for the --smoke self-test of this script


def log(*a):
    msg = f"[{time.monotonic() - T0:6.1f}s] " + " ".join(str(x) for x in a)
    print(msg, flush=True)
    if LOG is not None:
        LOG.write(msg + "\n")
        LOG.flush()


LOG = None


def cfg_name(cfg, asm=None) -> str:
    s = f"{cfg.block_m}x{cfg.block_n} w{cfg.warps} s{cfg.stages}" + (" swap" if cfg.swap_ab else "")
    s += (f" g{cfg.group_m}" if cfg.group_m != 8 else "") + (" tma" if cfg.tma else "") + (f" waves{cfg.waves}" if cfg.waves != 2 else "")
    return s if asm is None else f"{s} {asm}"


# ------------------------------------------------------------------------------------------ operands
_OPS = {}


def operands(op: str, m: int, n: int, k: int):
    """Cached GPU operands: (a, a_s, b, b_s, fp32 reference C) for fp8 / fp4."""
    key = (op, m, n, k)
    if key not in _OPS:
        import torch

        from lowbit.formats import FP8, MXFP4

        g = torch.Generator(device=DEVICE).manual_seed(m * 7 + n * 3 + k)
        a = FP8.quantize(torch.randn(m, k, device=DEVICE, generator=g), "group", 128)
        w = torch.randn(n, k, device=DEVICE, generator=g) * 0.05
        if op == "fp8":
            b = FP8.quantize(w, "block", 128)
            bd, bt, bs = b.dequantize(torch.float32), b.data, b.scale
        else:
            b = MXFP4.quantize(w)
            bd, bt, bs = b.dequantize(torch.float32), b.packed, b.scale
        ad = a.dequantize(torch.float32)
        prev = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        ref = ad @ bd.T
        torch.backends.cuda.matmul.allow_tf32 = prev
        _OPS[key] = (a.data, a.scale, bt, bs, ref)
    return _OPS[key]


def call(op: str, cfg, step, m, n, k):
    from lowbit.ops.fp4_gemm.tiled import fp4_gemm_tiled
    from lowbit.ops.fp8_gemm.tiled import fp8_gemm_tiled

    a, a_s, b, b_s, _ = operands(op, m, n, k)
    if op == "fp8":
        cfg = cfg._replace(tma=cfg.tma and DEVICE == "cuda")  # TMA: the GPU's loads, not the interpreter's
        return lambda: fp8_gemm_tiled(a, a_s, b, b_s, config=cfg)
    return lambda: fp4_gemm_tiled(a, a_s, b, b_s, config=cfg, aligned=step == "aligned")


def timer():
    """lowbit.bench.gemm.cold_us on the GPU; a plain wall-clock median for the CPU self-test."""
    if DEVICE == "cuda":
        from lowbit.bench.gemm import cold_us

        return cold_us

    def cpu_us(fn, graph=False):
        fn()
        ts = []
        for _ in range(3):
            t = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t)
        return sorted(ts)[1] * 1e6

    return cpu_us


def sync():
    import torch

    if DEVICE == "cuda":
        torch.cuda.synchronize()


def smoke() -> None:
    """Self-test of the check path on CPU (Triton interpreter, tiny shapes, a few candidates)."""
    global DEVICE
    DEVICE = "cpu"
    import lowbit

    lowbit.set_backend("triton")
    for bands in (FP8_BANDS, FP4_BANDS):
        for spec in bands.values():
            spec["ms"] = spec["ms"][:1]
            spec["shapes"] = [(96, 256)]
            spec["cfgs"] = spec["cfgs"][:2]
    for bands in (FP8_BANDS, FP4_BANDS):
        for spec in bands.values():
            spec["ms"] = tuple(min(m, 64) for m in spec["ms"])
    smoke = os.path.join(tempfile.gettempdir(), "tune_gemm_smoke.json")
    worker(0, 1, smoke)
    res = json.load(open(smoke))
    assert res and all(r["ok"] for r in res), res
    results = {}
    best = time_bands(results, res, time.monotonic() + 600)
    print(json.dumps(install(best)))
    json.dumps(results, default=str)
    print("smoke OK:", len(res), "cases")


def rel_err(c, ref) -> float:
    d = (c.float() - ref).norm() / ref.norm()
    return float(d) if not math.isnan(float(d)) else float("inf")


def jobs():
    """All (op, band, index, cfg, asm) candidates."""
    out = []
    if ONLY in (None, "fp8"):
        for band, spec in FP8_BANDS.items():
            out += [("fp8", band, i, cfg, None) for i, cfg in enumerate(spec["cfgs"])]
    if ONLY in (None, "fp4"):
        for band, spec in FP4_BANDS.items():
            out += [("fp4", band, i, cfg, asm) for i, (cfg, asm) in enumerate(spec["cfgs"])]
    return out


def band_spec(op, band):
    return (FP8_BANDS if op == "fp8" else FP4_BANDS)[band]


# ------------------------------------------------------------------------------------- phase 2: check
def worker(index: int, count: int, path: str) -> None:
    """Compile + correctness-check every count-th candidate on every shape / M of its band."""
    import torch

    res = []
    for j, (op, band, i, cfg, asm) in enumerate(jobs()):
        if j % count != index:
            continue
        spec = band_spec(op, band)
        for m in spec["ms"]:
            for n, k in spec["shapes"]:
                r = dict(op=op, band=band, idx=i, cfg=cfg_name(cfg, asm), m=m, n=n, k=k)
                t = time.monotonic()
                try:
                    c = call(op, cfg, asm, m, n, k)()
                    sync()
                    r["rel_err"] = rel_err(c, operands(op, m, n, k)[4])
                    r["ok"] = r["rel_err"] < TOL
                except Exception as e:  # compile / resource errors: record, go on
                    r["ok"] = False
                    r["error"] = f"{type(e).__name__}: {str(e)[-400:]}"
                    sync()
                r["check_s"] = round(time.monotonic() - t, 2)
                res.append(r)
                print(json.dumps(r), flush=True)
                if "error" in r:
                    break
            if res and "error" in res[-1]:
                break
        _OPS.clear()
        if DEVICE == "cuda":
            torch.cuda.empty_cache()
    with open(path, "w") as f:
        json.dump(res, f)


# -------------------------------------------------------------------------------------- phase 3: time
def time_bands(results: dict, checks: list, deadline: float) -> dict:
    import torch
    import torch.nn.functional as F

    cold_us = timer()

    ok = {}
    for r in checks:
        key = (r["op"], r["band"], r["idx"])
        ok[key] = ok.get(key, True) and r["ok"]
    best = {}
    for op, bands in (("fp8", FP8_BANDS), ("fp4", FP4_BANDS)):
        if ONLY not in (None, op):
            continue
        for band, spec in bands.items():
            rows = []
            base = {}
            for m in spec["ms"]:
                for n, k in spec["shapes"]:
                    if time.monotonic() > deadline:
                        break
                    # baselines on the same shape
                    a8 = torch.randn(m, k, device=DEVICE).to(torch.float8_e4m3fn)
                    w8 = torch.randn(n, k, device=DEVICE).to(torch.float8_e4m3fn)
                    wb = w8.to(torch.bfloat16)
                    ab = a8.to(torch.bfloat16)
                    one = torch.ones((), device=DEVICE)
                    sa, sb = torch.ones(m, 1, device=DEVICE), torch.ones(1, n, device=DEVICE)
                    g = m <= 64
                    b = {}
                    try:
                        b["scaled_mm tensor"] = cold_us(lambda: torch._scaled_mm(a8, w8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16), g)
                        b["scaled_mm rowwise"] = cold_us(lambda: torch._scaled_mm(a8, w8.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16), g)
                    except RuntimeError as e:
                        b["scaled_mm error"] = str(e)[:200]
                    b["bf16 F.linear"] = cold_us(lambda: F.linear(ab, wb), g)
                    base[f"M{m} N{n} K{k}"] = b
                    a8 = w8 = wb = ab = None
                    for i, entry in enumerate(spec["cfgs"]):
                        cfg, asm = (entry, None) if op == "fp8" else entry
                        if not ok.get((op, band, i), False):
                            continue
                        try:
                            us = cold_us(call(op, cfg, asm, m, n, k), g)
                        except Exception as e:
                            log(op, band, cfg_name(cfg, asm), "timing failed", type(e).__name__, str(e)[:200])
                            ok[(op, band, i)] = False
                            continue
                        nbytes = m * k + n * k * (1 if op == "fp8" else 0.5) + 2 * m * n
                        rows.append(dict(idx=i, cfg=cfg_name(cfg, asm), m=m, n=n, k=k, us=us,
                                         tflops=2 * m * n * k / us / 1e6, gbps=nbytes / us / 1e3,
                                         vs_tensor=b.get("scaled_mm tensor", float("nan")) / us,
                                         vs_rowwise=b.get("scaled_mm rowwise", float("nan")) / us))
                    _OPS.clear()
            # best: lowest geometric-mean time over the (M, shape) cases every candidate ran
            cases = {(r["m"], r["n"], r["k"]) for r in rows}
            score = {}
            for i in {r["idx"] for r in rows}:
                mine = {(r["m"], r["n"], r["k"]): r["us"] for r in rows if r["idx"] == i}
                if set(mine) == cases:
                    score[i] = math.exp(sum(math.log(v) for v in mine.values()) / len(mine))
            pick = min(score, key=score.get) if score else None
            results.setdefault("sweep", {}).setdefault(op, {})[band] = dict(rows=rows, baselines=base, geomean_us={
                cfg_name(*((spec["cfgs"][i], None) if op == "fp8" else spec["cfgs"][i])): v for i, v in score.items()})
            if pick is not None:
                best[(op, band)] = spec["cfgs"][pick]
                log(f"BEST {op} {band}: {cfg_name(*((spec['cfgs'][pick], None) if op == 'fp8' else spec['cfgs'][pick]))} "
                    f"geomean {score[pick]:.1f} us (before: {score.get(0, float('nan')):.1f} us)")
            for r in rows:
                log(f"  {op} {band} M{r['m']} N{r['n']} K{r['k']} {r['cfg']:34s} {r['us']:9.1f} us {r['tflops']:7.1f} TF/s "
                    f"{r['gbps']:7.0f} GB/s  x{r['vs_tensor']:.2f} tensor x{r['vs_rowwise']:.2f} rowwise")
            for case, b in base.items():
                log(f"  {op} {band} {case} baselines: " + ", ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in b.items()))
    return best


def install(best: dict) -> dict:
    """Put the best configs into the in-process tables (the files are edited by hand)."""
    from lowbit.ops.fp4_gemm import tiled as f4
    from lowbit.ops.fp8_gemm import tiled as f8

    fp8_band = {16: "m<=16", 64: "m<=64", 1024: "m<=1024", None: "m>1024"}
    fp4_band = {16: "m<=16", 64: "m<=64", None: "m>64"}
    f8.CONFIGS = tuple((max_m, best.get(("fp8", fp8_band.get(max_m)), cfg)) for max_m, cfg in f8.CONFIGS)
    f4.CONFIGS = tuple((max_m, *((best[("fp4", fp4_band.get(max_m))][0], best[("fp4", fp4_band.get(max_m))][1] == "aligned")
                                 if ("fp4", fp4_band.get(max_m)) in best else (cfg, aligned)))
                       for max_m, cfg, aligned in f4.CONFIGS)
    return {"fp8": [(m, cfg_name(c)) for m, c in f8.CONFIGS],
            "fp4": [(m, cfg_name(c, "aligned" if al else "four-dot")) for m, c, al in f4.CONFIGS]}


def run_bench(results: dict) -> None:
    from lowbit.bench.registry import BenchContext
    from lowbit.bench.timing import bf16_matmul_tflops, copy_bandwidth_gbps, fp8_matmul_tflops

    ctx = BenchContext(copy_gbps=copy_bandwidth_gbps(), bf16_tflops=bf16_matmul_tflops(), fp8_tflops=fp8_matmul_tflops())
    log("ctx", ctx)
    results["ctx"] = ctx.__dict__
    from lowbit.bench import gemm as bench

    rows = []
    for name, fn in (("fp4_gemm", bench.bench_fp4_gemm), ("fp8_gemm", bench.bench_fp8_gemm)):
        try:
            res = fn(ctx)
        except Exception:
            log(f"bench {name} failed:\n{traceback.format_exc()}")
            continue
        for r in res:
            fl = r.floor_us(ctx)
            log(f"{r.op:10s} {r.case:26s} {r.impl:24s} {r.us:9.1f} us  floor {fl:8.1f}  x{r.us / fl if fl else float('nan'):.2f}")
            rows.append(dict(op=r.op, case=r.case, impl=r.impl, us=r.us, bytes=r.bytes, flops=r.flops, floor_us=fl))
        results["bench"] = rows


# ------------------------------------------------------------------------------------------------ main
def main(argv: list[str] | None = None, prog: str = "lowbit tune fp8_gemm") -> int:
    global LOG, ONLY
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    ap.add_argument("--budget", type=float, default=250.0, help="seconds for the whole run")
    ap.add_argument("--workers", type=int, default=6, help="compile / check worker processes")
    ap.add_argument("--no-bench", action="store_true", help="skip the benchmark run after the sweep")
    ap.add_argument("--only", choices=("fp8", "fp4"), default=None, help="sweep one op's bands")
    ap.add_argument("--out", default=os.environ.get("OUT", "."), help="directory of tune.json / tune.log")
    ap.add_argument("--smoke", action="store_true", help="CPU self-test of the tuner (needs TRITON_INTERPRET=1)")
    ap.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--worker-out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.only:
        ONLY = os.environ["TUNE_GEMM_ONLY"] = args.only
    if args.smoke:
        smoke()
        return 0
    from lowbit.ops._tuning import cuda_missing

    if cuda_missing(prog):
        return 2
    if args.worker is not None:
        worker(args.worker, args.workers, args.worker_out)
        return 0

    out = args.out
    os.makedirs(out, exist_ok=True)
    LOG = open(os.path.join(out, "tune.log"), "w")
    deadline = T0 + args.budget
    results = {"budget_s": args.budget}
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    wlog = open(os.path.join(out, "workers.log"), "w")
    workers = []
    for i in range(args.workers):
        path = os.path.join(tempfile.gettempdir(), f"tune_gemm_worker{i}.json")
        if os.path.exists(path):
            os.remove(path)
        workers.append((path, subprocess.Popen([sys.executable, "-m", "lowbit.ops.fp8_gemm.tune", "--worker", str(i),
                                                "--workers", str(args.workers), "--worker-out", path], env=env,
                                               stdout=wlog, stderr=subprocess.STDOUT)))
    log(f"{args.workers} compile/check workers")
    checks = []
    for path, p in workers:
        try:
            p.wait(timeout=max(1.0, T0 + 0.55 * args.budget - time.monotonic()))
        except subprocess.TimeoutExpired:
            log(f"worker {path} over its time: killed (its candidates are skipped)")
            p.kill()
            p.wait()
        if os.path.exists(path):
            checks += json.load(open(path))
    results["checks"] = checks
    bad = [r for r in checks if not r["ok"]]
    log(f"checked {len(checks)} candidate cases, {len(bad)} failed")
    for r in bad:
        log("  FAILED", r["op"], r["band"], r["cfg"], f"M{r['m']} N{r['n']} K{r['k']}", r.get("error", f"rel_err {r.get('rel_err')}"))

    import torch

    log("device", torch.cuda.get_device_name(), "torch", torch.__version__)
    best = {}
    try:
        best = time_bands(results, checks, deadline - (60 if not args.no_bench else 5))
    except Exception:
        log("GEMM sweep failed:\n" + traceback.format_exc())
    results["best"] = {f"{op} {band}": cfg_name(*((c, None) if op == "fp8" else c)) for (op, band), c in best.items()}
    results["installed"] = install(best)
    log("installed tables:", json.dumps(results["installed"]))
    json.dump(results, open(os.path.join(out, "tune.json"), "w"), indent=1, default=str)
    if not args.no_bench and time.monotonic() < deadline - 30:
        try:
            run_bench(results)
        except Exception:
            log("bench failed:\n" + traceback.format_exc())
    else:
        log("bench skipped (budget)")
    json.dump(results, open(os.path.join(out, "tune.json"), "w"), indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
