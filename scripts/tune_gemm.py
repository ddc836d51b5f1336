"""Validate and tune the FP8 / FP4 GEMM family (``fp8_gemm``, ``fp4_gemm``, ``act_quant``) on an H200.

One command does everything a single GPU session needs (results under ``$OUT``, default ``.``):

1. runs the ``cuda`` tier of the family's tests (``pytest -m cuda``, log ``pytest.log``) and
   ``scripts/check_sass.py`` (log ``sass.log``) as subprocesses;
2. meanwhile, worker processes compile every candidate launch config once (Triton's disk cache
   then serves the timing phase) and check its output against an fp32 reference of the
   dequantized operands on the benchmark shapes (``rel err < 2^-8``);
3. after the tests finish, times every correct candidate per M band on a subset of the benchmark
   shapes (cold L2, CUDA-graph replay for M <= 64: ``lowbit.bench.gemm.cold_us``), with the
   ``_scaled_mm`` / ``F.linear`` baselines on the same shapes, and prints the best config per band;
4. installs the best configs in-process and runs the ``fp8_gemm`` / ``fp4_gemm`` / ``act_quant``
   benchmarks of ``lowbit/bench/gemm.py`` (all shapes, baselines in the same run).

Everything lands in ``tune.json``; the whole run is bounded by ``--budget`` seconds (phases that
would not fit are skipped and say so). Copy the chosen configs into the ``_CONFIGS`` tables by hand.

    python scripts/tune_gemm.py [--budget 250] [--no-tests] [--no-bench]
    python scripts/tune_gemm.py --compile-only     # no GPU: compile every candidate for sm_90,
                                                   # print shared memory / registers / spills
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

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from lowbit.ops.fp8_gemm.triton import GemmConfig as C  # noqa: E402  (imports triton, not CUDA)

DEC_SHAPES = [(7168, 16384), (2112, 7168), (24576, 1536)]
# band -> M values timed, (N, K) shapes, candidates. The first candidate of each band is the config
# the tables held before the first tuning run (its "before" numbers, docs/gemm.md); the tuned
# choices are among the others. fp4 candidates are (config, asm upcast).
FP8_BANDS = {
    "m<=16": dict(ms=(1, 16), shapes=DEC_SHAPES, cfgs=[
        C(16, 64, 4, 5, True, prefetch=False), C(16, 64, 4, 5, True, prefetch=True),
        C(16, 64, 4, 6, True), C(16, 64, 4, 8, True), C(16, 128, 4, 4, True), C(16, 128, 4, 6, True),
        C(16, 128, 8, 4, True), C(16, 64, 4, 6, True, waves=4), C(16, 128, 4, 6, True, waves=4),
        C(16, 256, 8, 4, True), C(16, 64, 4, 5, True), C(16, 64, 4, 6, True, waves=3), C(16, 64, 4, 4, True)]),
    "m<=64": dict(ms=(64,), shapes=DEC_SHAPES, cfgs=[
        C(64, 64, 4, 3, False, prefetch=False), C(64, 64, 4, 3, False, prefetch=True),
        C(64, 64, 4, 5, True), C(64, 128, 4, 4, True), C(64, 128, 8, 4, True), C(64, 64, 4, 6, True),
        C(64, 128, 4, 4, False), C(64, 128, 4, 6, True), C(64, 64, 4, 5, True, waves=4),
        C(64, 128, 4, 5, False), C(64, 128, 4, 6, False), C(64, 64, 4, 4, False), C(64, 256, 8, 4, False),
        C(64, 128, 4, 4, False, waves=4), C(64, 128, 8, 4, False),
        C(64, 64, 4, 3, False), C(64, 64, 4, 5, False), C(64, 64, 4, 6, False), C(64, 32, 4, 4, False),
        C(64, 64, 4, 4, False, waves=4), C(64, 64, 4, 4, False, waves=1), C(64, 64, 8, 4, False), C(64, 32, 4, 6, False)]),
    "m<=1024": dict(ms=(512,), shapes=[(7168, 16384), (2112, 7168), (4096, 7168)], cfgs=[
        C(128, 128, 8, 4, False), C(64, 128, 4, 4, False), C(128, 128, 8, 4, False, 8, True),
        C(128, 128, 8, 3, False, 8, True, waves=1), C(64, 256, 8, 3, False, 8, True), C(64, 128, 4, 4, False, 8, True)]),
    "m>1024": dict(ms=(4096,), shapes=[(7168, 16384), (4096, 7168), (24576, 1536)], cfgs=[
        C(128, 128, 8, 4, False, 16, True, prefetch=False), C(128, 128, 8, 4, False, 16, True, prefetch=True),
        C(128, 128, 8, 4, False), C(128, 128, 8, 4, False, 8, True), C(128, 128, 8, 5, False, 8, True),
        C(128, 128, 8, 3, False, 8, True), C(256, 128, 16, 3, False, 8, True), C(64, 256, 8, 4, False, 8, True),
        C(128, 128, 8, 4, False, 16, True), C(128, 128, 8, 4, False, 4, True),
        # one-warpgroup tiles: fewer registers per CTA, so 2-3 CTAs per SM overlap one CTA's
        # scale-FMA phase (the dot must complete before it) with another's wgmma
        C(128, 64, 4, 4, False, 16, True), C(128, 64, 4, 6, False, 16, True), C(64, 128, 4, 5, False, 16, True),
        C(128, 128, 8, 5, False, 16, True, waves=1)]),
}
# fp4 variants: "alu" / "asm" = four 32-wide dots per 128 block with the integer / PRMT upcast
# (the kernel before the aligned step), "aligned" = one 128-wide dot per block on shift-aligned
# groups (lowbit/ops/fp4_gemm/triton.py, the default). The first candidate of each band is the
# previous table entry.
FP4_BANDS = {
    "m<=16": dict(ms=(1, 16), shapes=DEC_SHAPES, cfgs=[
        (C(16, 64, 4, 4, True, prefetch=False), "asm"),
        (C(16, 64, 4, 4, True), "asm"), (C(16, 64, 4, 4, True), "aligned"), (C(16, 128, 4, 4, True), "aligned"),
        (C(16, 64, 4, 6, True), "aligned"), (C(16, 128, 4, 6, True), "aligned"), (C(16, 128, 8, 4, True), "aligned"),
        (C(16, 256, 8, 3, True), "aligned"), (C(16, 64, 4, 4, True, waves=4), "aligned"),
        (C(16, 128, 4, 4, True, waves=4), "aligned"),
        # not swapped: the decoded weight is the wgmma B operand via shared memory
        (C(16, 64, 4, 4, False), "aligned"), (C(16, 128, 4, 4, False), "aligned"), (C(64, 128, 4, 4, False), "aligned"),
        (C(16, 64, 4, 6, False), "aligned"), (C(64, 64, 4, 4, False), "aligned"), (C(16, 256, 8, 4, False), "aligned")]),
    "m<=64": dict(ms=(64,), shapes=DEC_SHAPES, cfgs=[
        (C(64, 64, 4, 4, True, prefetch=False), "asm"),
        (C(64, 64, 4, 4, True), "asm"), (C(64, 64, 4, 4, True), "aligned"), (C(64, 128, 4, 4, True), "aligned"),
        (C(64, 128, 8, 3, True), "aligned"), (C(64, 64, 4, 6, True), "aligned"), (C(64, 128, 8, 4, True), "aligned"),
        (C(64, 128, 4, 4, False), "aligned"), (C(64, 64, 4, 4, False), "aligned"), (C(64, 256, 8, 3, False), "aligned")]),
    "m>64": dict(ms=(4096,), shapes=[(4096, 7168), (7168, 2048)], cfgs=[
        (C(128, 64, 4, 4, False, prefetch=False), "aligned"), (C(128, 64, 4, 4, False), "aligned"),
        (C(128, 128, 8, 3, True), "asm"), (C(128, 128, 8, 3, True), "aligned"), (C(64, 128, 8, 3, True), "aligned"),
        (C(128, 128, 8, 4, True), "aligned"), (C(128, 256, 8, 3, True), "aligned"), (C(64, 256, 8, 3, True), "aligned"),
        (C(128, 128, 4, 3, True), "aligned"),
        (C(128, 128, 8, 3, False), "aligned"), (C(128, 64, 4, 4, False), "aligned"), (C(64, 128, 4, 4, False), "aligned"),
        (C(128, 256, 8, 3, False), "aligned"), (C(128, 128, 8, 4, False, 16), "aligned")]),
}
# (elements per program, num_warps); the first is the table's value
ACT_CFGS = [(4096, 4), (2048, 4), (8192, 4), (8192, 8), (16384, 8), (4096, 8), (32768, 16)]
TOL = 2.0**-8
ACT_SHAPE = (8192, 7168)

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
    s += "" if cfg.prefetch else " noprefetch"
    if asm is None:
        return s
    return s + (f" {asm}" if isinstance(asm, str) else (" asm" if asm else " alu"))


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


def call(op: str, cfg, asm, m, n, k):
    from lowbit.ops.fp4_gemm import triton as f4
    from lowbit.ops.fp8_gemm import triton as f8

    a, a_s, b, b_s, _ = operands(op, m, n, k)
    if op == "fp8":
        return lambda: f8.fp8_gemm(a, a_s, b, b_s, config=cfg)
    return lambda: f4.fp4_gemm(a, a_s, b, b_s, config=cfg, asm=asm != "alu", aligned=asm == "aligned")


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
    global ACT_SHAPE
    ACT_SHAPE = (4, 1024)
    for bands in (FP8_BANDS, FP4_BANDS):
        for spec in bands.values():
            spec["ms"] = tuple(min(m, 64) for m in spec["ms"])
    smoke = os.path.join(tempfile.gettempdir(), "tune_gemm_smoke.json")
    worker(0, 1, smoke)
    res = json.load(open(smoke))
    assert res and all(r["ok"] for r in res), res
    results = {}
    act = time_act_quant(results)
    best = time_bands(results, res, time.monotonic() + 600)
    print(json.dumps(install(best, act)))
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
                    del a8, w8, wb, ab
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


def time_act_quant(results: dict) -> tuple:
    import torch

    cold_us = timer()
    from lowbit.ops.act_quant import triton as aq
    from lowbit.ops.act_quant.reference import act_quant_ref

    x = torch.randn(*ACT_SHAPE, device=DEVICE, dtype=torch.bfloat16) * 3
    ry, rs = act_quant_ref(x, 128)
    copy_us = cold_us(lambda: x.clone())
    nbytes = x.numel() * 2 + x.numel() + x.numel() // 128 * 4
    rows = [dict(cfg="copy x.clone()", us=copy_us, gbps=x.numel() * 4 / copy_us / 1e3)]
    best, best_us = None, float("inf")
    for cfg in ACT_CFGS:
        try:
            y, s = aq.act_quant(x, 128, False, False, config=cfg)
            exact = bool(torch.equal(y.view(torch.uint8), ry.view(torch.uint8)) and torch.equal(s, rs))
            us = cold_us(lambda: aq.act_quant(x, 128, False, False, config=cfg))
            q_us = cold_us(lambda: aq.fp4_act_quant(x, 32, False, config=cfg))
        except Exception as e:
            rows.append(dict(cfg=str(cfg), error=f"{type(e).__name__}: {str(e)[:300]}"))
            continue
        row = dict(cfg=str(cfg), us=us, gbps=nbytes / us / 1e3, pct_copy=(nbytes / us) / (x.numel() * 4 / copy_us),
                   bit_exact=exact, fp4_us=q_us)
        rows.append(row)
        log(f"  act_quant {cfg}: {us:.1f} us {row['gbps']:.0f} GB/s = {100 * row['pct_copy']:.1f}% of copy, exact={exact}; fp4_act_quant {q_us:.1f} us")
        if exact and us < best_us:
            best, best_us = cfg, us
    log(f"  copy: {copy_us:.1f} us ({rows[0]['gbps']:.0f} GB/s)")
    results["act_quant_sweep"] = rows
    if best:
        log(f"BEST act_quant: {best} {best_us:.1f} us")
    return best


def install(best: dict, act_best) -> dict:
    """Put the best configs into the in-process tables (the files are edited by hand)."""
    from lowbit.ops.act_quant import triton as aq
    from lowbit.ops.fp4_gemm import triton as f4
    from lowbit.ops.fp8_gemm import triton as f8

    def merge(table, op, band_of):
        out = []
        for max_m, cfg in table:
            pick = best.get((op, band_of.get(max_m)))
            out.append((max_m, pick if pick is not None else cfg))
        return tuple(out)

    def merge_fp4(table, band_of):
        # fp4 rows are (max M, config, aligned); a pick is (config, variant)
        out = []
        for max_m, cfg, aligned in table:
            pick = best.get(("fp4", band_of.get(max_m)))
            out.append((max_m, pick[0], pick[1] == "aligned") if pick is not None else (max_m, cfg, aligned))
        return tuple(out)

    f8._CONFIGS = merge(f8._CONFIGS, "fp8", {16: "m<=16", 64: "m<=64", 1024: "m<=1024", None: "m>1024"})
    f4._CONFIGS = merge_fp4(f4._CONFIGS, {16: "m<=16", 64: "m<=64", None: "m>64"})
    # the asm / alu upcast choice is global (fp4_gemm(asm=True) default): report it
    asm_pick = {band: c[1] for (op, band), c in best.items() if op == "fp4"}
    if act_best:
        aq.ACT_QUANT_CONFIG = act_best
    return {"fp8": [(m, cfg_name(c)) for m, c in f8._CONFIGS], "fp4": [(m, cfg_name(c, "aligned" if al else "asm")) for m, c, al in f4._CONFIGS],
            "fp4_asm_by_band": asm_pick, "act_quant": aq.ACT_QUANT_CONFIG}


def run_bench(results: dict) -> None:
    from lowbit.bench.registry import BenchContext
    from lowbit.bench.timing import bf16_matmul_tflops, copy_bandwidth_gbps, fp8_matmul_tflops

    ctx = BenchContext(copy_gbps=copy_bandwidth_gbps(), bf16_tflops=bf16_matmul_tflops(), fp8_tflops=fp8_matmul_tflops())
    log("ctx", ctx)
    results["ctx"] = ctx.__dict__
    from lowbit.bench import gemm as bench

    rows = []
    for name, fn in (("act_quant", bench.bench_act_quant), ("fp4_gemm", bench.bench_fp4_gemm), ("fp8_gemm", bench.bench_fp8_gemm)):
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


# ----------------------------------------------------------------------------- offline compile check
def compile_only() -> None:
    """Compile each candidate for sm_90 without a GPU; print shared memory and the cubin's resource use."""
    import re

    from sm90_offline import compile_sm90, resource_usage, root_cause

    from lowbit.ops.fp4_gemm import triton as f4
    from lowbit.ops.fp8_gemm import triton as f8

    names = ["a", "as_ptr", "b", "bs_ptr", "out_ptr", "M", "N", "K", "n_kb", "kb_per_split"]
    for op, band, i, cfg, asm in jobs():
        bytes_b = "*fp8e4nv" if op == "fp8" else "*u8"
        sig = {"a": "*fp8e4nv", "as_ptr": "*fp32", "b": bytes_b, "bs_ptr": "*fp32" if op == "fp8" else "*u8",
               "out_ptr": "*fp32", "M": "i32", "N": "i32", "K": "i32", "n_kb": "i32", "kb_per_split": "i32"}
        const = dict(AS_E8M0=False, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, GROUP_M=cfg.group_m, PREFETCH=cfg.prefetch)
        if op == "fp8" and cfg.tma:
            fn = f8._fp8_gemm_tma_kernel
            sig["a"] = f"tensordesc<fp8e4nv[{cfg.block_m}, 128]>"
            sig["b"] = f"tensordesc<fp8e4nv[{cfg.block_n}, 128]>"
            const.update(BS_E8M0=False)
        elif op == "fp8":
            fn = f8._fp8_gemm_kernel
            const.update(BS_E8M0=False, SWAP_AB=cfg.swap_ab, INTERPRET=False)
        else:
            fn = f4._fp4_gemm_kernel
            const.update(SWAP_AB=cfg.swap_ab, INTERPRET=False, ASM=asm != "alu", ALIGNED=asm == "aligned", FAR=True)
        sig = {(p if p not in ("a", "b") else p + ("_desc" if cfg.tma and op == "fp8" else "_ptr")): v for p, v in sig.items()}
        div = [j for j, p in enumerate(names) if p in ("a", "as_ptr", "b", "bs_ptr", "out_ptr", "N", "K") and not (cfg.tma and p in ("a", "b"))]
        t = time.monotonic()
        try:
            k = compile_sm90(fn, sig, const, div, cfg.warps, cfg.stages)
            res = resource_usage(k)
            wg = sorted(set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+)", k.asm["ptx"])))
            print(f"{op} {band:8s} {cfg_name(cfg, asm):34s} shared {k.metadata.shared:6d}  {res}  wgmma {wg}  {time.monotonic() - t:.1f}s", flush=True)
        except Exception as e:
            print(f"{op} {band:8s} {cfg_name(cfg, asm):34s} FAILED {root_cause(e)}", flush=True)


# ------------------------------------------------------------------------------------------------ main
def main() -> int:
    global LOG
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--budget", type=float, default=250.0, help="seconds for the whole run")
    ap.add_argument("--workers", type=int, default=6)
    ap.add_argument("--no-tests", action="store_true")
    ap.add_argument("--no-bench", action="store_true")
    ap.add_argument("--compile-only", action="store_true")
    ap.add_argument("--only", choices=("fp8", "fp4"), default=None, help="sweep one op (skips the act_quant sweep)")
    ap.add_argument("--smoke", action="store_true", help="CPU self-test of the script (needs TRITON_INTERPRET=1)")
    ap.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--worker-out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    global ONLY
    if args.only:
        ONLY = os.environ["TUNE_GEMM_ONLY"] = args.only
    if args.compile_only:
        compile_only()
        return 0
    if args.smoke:
        smoke()
        return 0
    if args.worker is not None:
        worker(args.worker, args.workers, args.worker_out)
        return 0

    out = os.environ.get("OUT", ".")
    os.makedirs(out, exist_ok=True)
    LOG = open(os.path.join(out, "tune.log"), "w")
    deadline = T0 + args.budget
    results = {"budget_s": args.budget}
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), PYTHONUNBUFFERED="1")
    procs = {}
    if not args.no_tests:
        tests = ["tests/ops/test_act_quant.py", "tests/ops/test_fp8_gemm.py", "tests/ops/test_fp4_gemm.py", "tests/nn/test_linear.py"]
        procs["pytest"] = subprocess.Popen([sys.executable, "-m", "pytest", *tests, "-m", "cuda", "-q", "-p", "no:cacheprovider",
                                            "--timeout=100", "-rfEs"], cwd=ROOT, env=env,
                                           stdout=open(os.path.join(out, "pytest.log"), "w"), stderr=subprocess.STDOUT)
        procs["sass"] = subprocess.Popen([sys.executable, os.path.join(ROOT, "scripts", "check_sass.py")], cwd=ROOT, env=env,
                                         stdout=open(os.path.join(out, "sass.log"), "w"), stderr=subprocess.STDOUT)
    wlog = open(os.path.join(out, "workers.log"), "w")
    workers = []
    for i in range(args.workers):
        path = os.path.join(tempfile.gettempdir(), f"tune_gemm_worker{i}.json")
        if os.path.exists(path):
            os.remove(path)
        workers.append((path, subprocess.Popen([sys.executable, __file__, "--worker", str(i), "--workers", str(args.workers),
                                                "--worker-out", path], cwd=ROOT, env=env, stdout=wlog, stderr=subprocess.STDOUT)))
    log("started", list(procs), f"{args.workers} compile/check workers")
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
    for name, p in procs.items():
        try:
            p.wait(timeout=max(1.0, T0 + 0.65 * args.budget - time.monotonic()))
            log(f"{name} finished rc={p.returncode}")
        except subprocess.TimeoutExpired:
            log(f"{name} still running: timing proceeds beside it (numbers may be perturbed)")
    results["tests_done_before_timing"] = all(p.poll() is not None for p in procs.values())

    import torch

    log("device", torch.cuda.get_device_name(), "torch", torch.__version__)
    best, act_best = {}, None
    try:
        act_best = time_act_quant(results) if ONLY is None else None
    except Exception:
        log("act_quant sweep failed:\n" + traceback.format_exc())
    try:
        best = time_bands(results, checks, deadline - (60 if not args.no_bench else 5))
    except Exception:
        log("GEMM sweep failed:\n" + traceback.format_exc())
    results["best"] = {f"{op} {band}": cfg_name(*((c, None) if op == "fp8" else c)) for (op, band), c in best.items()}
    results["installed"] = install(best, act_best)
    log("installed tables:", json.dumps(results["installed"]))
    json.dump(results, open(os.path.join(out, "tune.json"), "w"), indent=1, default=str)
    if not args.no_bench and time.monotonic() < deadline - 30:
        try:
            run_bench(results)
        except Exception:
            log("bench failed:\n" + traceback.format_exc())
    else:
        log("bench skipped (budget)")
    for name, p in procs.items():
        try:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            log(f"{name} did not finish within the budget: killed")
            p.kill()
            p.wait()
        results[f"{name}_rc"] = p.returncode
        log(f"{name} rc={p.returncode}")
    json.dump(results, open(os.path.join(out, "tune.json"), "w"), indent=1, default=str)
    for name in ("pytest", "sass"):
        path = os.path.join(out, f"{name}.log")
        if os.path.exists(path):
            tail = open(path).read()[-3000:]
            log(f"---- {name}.log (tail) ----\n{tail}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
