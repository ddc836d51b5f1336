"""Sweep the launch configs of ``act_quant`` (FP8 e4m3, 1x128 scales) on the H200, bit-exact ones only.

For x = randn [8192, 7168] bf16, every candidate ``ActQuantConfig`` (elements per program,
num_warps, persistent grid-stride loop, its cp.async pipelining depth, eviction hints, the
division-free ``fast`` arithmetic) is run for fp32 scales (``scale_fmt=None``) and power-of-two
scales (``"ue8m0"``), checked bit for bit against the reference computed on the CPU from the same
x (``INVALID`` on any mismatch), and timed with ``lowbit.bench.timing.time_us`` (do_bench, L2
flushed). ``x.clone()`` and ``dst.copy_(x)`` of the same tensor are timed in the same run, and the
device copy bandwidth is ``lowbit.bench.timing.copy_bandwidth_gbps()`` (2 GiB ``copy_``).

Bandwidth = (bytes read + bytes written) / time: x bf16 read, y e4m3 + scales (fp32, or one byte
for UE8M0 bytes) written. ``%copy`` divides it by the device copy bandwidth (the target: >= 75%);
``%clone`` by the same-tensor ``x.clone()`` bandwidth; ``clone/us`` is the clone's time over the
kernel's, the ratio the ``act_quant`` benchmark row reports as its speedup vs ``copy (x.clone())``
(a time ratio: the clone moves 4 bytes per element, act_quant 3.03, so 1.0x there is 76% of the
clone's bandwidth). The best configs are re-timed with ``lowbit.bench.gemm.cold_us`` (the
benchmark rows' timer: L2 flushed by reading), beside the public ``act_quant(x)`` with the table
config. ``fp4_act_quant`` is swept on the same x over ``Fp4ActQuantConfig`` (elements, warps, the
``fast`` kernel: contiguous loads, exact reciprocal / Markstein division, bit-arithmetic E2M1; eviction
hints) for MXFP4 (UE8M0 per 32) and E4M3 scales per 16, bit-exact vs the CPU reference; it prints
the ``FP4_ACT_QUANT_CONFIG = ...`` line to paste (the lowest worst-case time over both formats).

Compiles run first in worker processes (Triton's disk cache then serves the timing phase) while
the CPU references are computed. The whole run takes about a minute on one H200; nothing is
installed: copy the chosen config into ``ACT_QUANT_CONFIG`` (lowbit/ops/act_quant/triton.py) by hand.

    PYTHONPATH=$PWD python scripts/tune_act_quant.py [--json PATH] [--workers 8] [--quick]
    python scripts/tune_act_quant.py --compile-only    # no GPU: compile every candidate for sm_90,
                                                       # print registers / shared memory / SASS
    TRITON_INTERPRET=1 python scripts/tune_act_quant.py --smoke   # CPU self-test of the script
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from lowbit.ops.act_quant.triton import ACT_QUANT_CONFIG, ActQuantConfig as C  # noqa: E402  (imports triton, not CUDA)
from lowbit.ops.act_quant.triton import FP4_ACT_QUANT_CONFIG, Fp4ActQuantConfig as F4  # noqa: E402

SHAPE = (8192, 7168)
BS = 128
DEVICE = "cuda"  # "cpu" for --smoke (Triton interpreter, tiny shape)

# FP8 candidates; the table's config first. Persistent ones launch persistent x 132 programs.
CFGS = [C(*ACT_QUANT_CONFIG)]
for fast in (False, True):
    CFGS += [C(e, w, fast=fast) for e, w in ((2048, 2), (2048, 4), (4096, 4), (4096, 8), (8192, 4), (8192, 8),
                                             (16384, 8), (16384, 16), (32768, 16))]
CFGS += [C(4096, 4, evict=1), C(4096, 4, evict=1, fast=True), C(8192, 8, evict=1, fast=True),
         C(4096, 4, evict=2, fast=True), C(8192, 8, evict=2, fast=True),
         C(4096, 4, persistent=8), C(4096, 4, persistent=8, stages=2)]
CFGS += [C(4096, 4, persistent=p, stages=st, fast=True) for p in (4, 8) for st in (1, 2, 3)]
CFGS += [C(8192, 8, persistent=p, stages=st, fast=True) for p in (2, 4) for st in (1, 2)]
CFGS += [C(2048, 4, persistent=8, stages=2, fast=True), C(16384, 16, persistent=1, stages=2, fast=True),
         C(4096, 4, persistent=8, stages=2, evict=1, fast=True)]
CFGS = list(dict.fromkeys(CFGS))
QUICK = [C(*ACT_QUANT_CONFIG), C(4096, 4, fast=True), C(8192, 8, fast=True), C(4096, 4, evict=1, fast=True),
         C(4096, 4, persistent=8, stages=2, fast=True)]
# (scale_fmt, UE8M0 bytes): the sweep formats; the third is re-checked for the best configs only
FMTS = [(None, False), ("ue8m0", False)]
E8M0_FMT = ("ue8m0", True)
# fp4_act_quant candidates (Fp4ActQuantConfig: elems, warps, fast, evict); the table's first. fast=2
# differs from fast=1 for E4M3 scales only (Markstein instead of a division per element): for
# UE8M0 it is the same kernel, so UE8M0 runs the fast <= 1 candidates and reuses their times.
FP4_CFGS = [F4(*FP4_ACT_QUANT_CONFIG), F4(4096, 4), F4(8192, 8)]
FP4_CFGS += [F4(e, w, fast) for fast in (1, 2) for e, w in ((1024, 1), (2048, 2), (2048, 4), (4096, 4), (4096, 8),
                                                            (8192, 4), (8192, 8), (16384, 8), (16384, 16))]
FP4_CFGS += [F4(4096, 4, 1, 1), F4(4096, 4, 1, 2), F4(8192, 8, 1, 2), F4(4096, 4, 2, 1), F4(8192, 8, 2, 2)]
FP4_CFGS = list(dict.fromkeys(FP4_CFGS))
FP4_QUICK = [F4(*FP4_ACT_QUANT_CONFIG), F4(4096, 4, 1), F4(8192, 8, 1), F4(4096, 4, 2)]
# (scale_fmt, block size)
FP4_FMTS = [("ue8m0", 32), ("e4m3", 16)]


def fp4_runs(cfg: F4, fmt) -> bool:
    """Whether the sweep times cfg for fmt (UE8M0 skips fast=2, the fast=1 kernel)."""
    return not (fmt[0] == "ue8m0" and cfg.fast >= 2)


def fp4_twin(cfg: F4, fmt) -> F4:
    """The candidate whose time stands for cfg in fmt."""
    return cfg._replace(fast=1) if fmt[0] == "ue8m0" and cfg.fast >= 2 else cfg

T0 = time.monotonic()


def log(*a):
    print(f"[{time.monotonic() - T0:6.1f}s] " + " ".join(str(x) for x in a), flush=True)


def cfg_name(cfg: C) -> str:
    s = f"{cfg.elems}/w{cfg.warps}"
    if cfg.persistent:
        s += f" pers{cfg.persistent} st{cfg.stages}"
    s += {0: "", 1: " evict-x", 2: " evict-xy"}[cfg.evict]
    return s + (" fast" if cfg.fast else "")


def fmt_name(fmt) -> str:
    scale_fmt, e8m0 = fmt
    return "fp32 scales" if scale_fmt is None else ("ue8m0 bytes" if e8m0 else "ue8m0 (fp32)")


def nbytes(numel: int, fmt) -> int:
    """bf16 x read + e4m3 y written + one scale per 128 (fp32, or one byte for UE8M0 bytes)."""
    return numel * 2 + numel + numel // BS * (1 if fmt[1] else 4)


def fp4_nbytes(numel: int, bs: int = 32) -> int:
    """bf16 x read + packed codes (half a byte each) + one byte scale per bs written."""
    return numel * 2 + numel // 2 + numel // bs


def fp4_cfg_name(cfg) -> str:
    cfg = F4(*cfg)
    s = f"{cfg.elems}/w{cfg.warps}" + ("" if not cfg.fast else " fast" if cfg.fast == 1 else " fast-markstein")
    return s + {0: "", 1: " evict-x", 2: " evict-xy"}[cfg.evict]


def make_x():
    import torch

    g = torch.Generator(device=DEVICE).manual_seed(0)
    return torch.randn(*SHAPE, device=DEVICE, generator=g).to(torch.bfloat16)


def run_fp8(x, cfg, fmt):
    from lowbit.ops.act_quant import triton as aq

    return aq.act_quant(x, BS, fmt[0] == "ue8m0", fmt[1], config=cfg)


def run_fp4(x, cfg, fmt=FP4_FMTS[0]):
    from lowbit.ops.act_quant import triton as aq

    return aq.fp4_act_quant(x, fmt[1], fmt[0] == "e4m3", config=cfg)


# ------------------------------------------------------------------------------ compile workers
def jobs(cfgs, fp4_cfgs=None):
    return [("fp8", cfg, fmt) for fmt in FMTS for cfg in cfgs] + [
        ("fp4", cfg, fmt) for fmt in FP4_FMTS for cfg in (fp4_cfgs or FP4_CFGS) if fp4_runs(cfg, fmt)]


def worker(index: int, count: int, path: str, quick: bool) -> None:
    """Run every count-th candidate once (compiles it into Triton's disk cache); record errors."""
    import torch

    x = make_x()
    res = []
    for j, (op, cfg, fmt) in enumerate(jobs(QUICK, FP4_QUICK) if quick else jobs(CFGS)):
        if j % count != index:
            continue
        t = time.monotonic()
        r = dict(op=op, cfg=list(cfg), fmt=list(fmt) if fmt else None)
        try:
            run_fp8(x, cfg, fmt) if op == "fp8" else run_fp4(x, cfg, fmt)
            torch.cuda.synchronize()
            r["ok"] = True
        except Exception as e:  # compile / resource errors: the main process skips the candidate
            r["ok"] = False
            r["error"] = f"{type(e).__name__}: {str(e)[-300:]}"
        r["compile_s"] = round(time.monotonic() - t, 2)
        res.append(r)
    with open(path, "w") as f:
        json.dump(res, f)


def start_workers(n: int, quick: bool):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), PYTHONUNBUFFERED="1")
    out = []
    for i in range(n):
        path = os.path.join(tempfile.gettempdir(), f"tune_act_quant_worker{i}.json")
        if os.path.exists(path):
            os.remove(path)
        args = [sys.executable, os.path.abspath(__file__), "--worker", str(i), "--workers", str(n), "--worker-out", path]
        out.append((path, subprocess.Popen(args + (["--quick"] if quick else []), cwd=ROOT, env=env)))
    return out


def wait_workers(workers, timeout: float) -> dict:
    """{(op, cfg, fmt): error} of the candidates that failed to compile / run."""
    failed = {}
    deadline = time.monotonic() + timeout
    for path, p in workers:
        try:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            log(f"compile worker {path} over its time: killed (the main process compiles what is left)")
            p.kill()
            p.wait()
        if os.path.exists(path):
            for r in json.load(open(path)):
                if not r["ok"]:
                    failed[(r["op"], tuple(r["cfg"]), tuple(r["fmt"]) if r["fmt"] else None)] = r["error"]
    return failed


# ---------------------------------------------------------------------------------------- checks
def mismatch(y, s, ry, rs) -> str | None:
    """None when (y, s) equal the reference bit for bit, else a short description."""
    import torch

    def bits(t):
        return t.view(torch.uint8) if t.element_size() == 1 else t.view(torch.int32)

    dy = bits(y) != bits(ry)
    ds = bits(s) != bits(rs)
    ny, ns = int(dy.sum()), int(ds.sum())
    if not ny and not ns:
        return None
    msg = f"{ny} y bytes, {ns} scales differ"
    if ny:
        i = dy.flatten().nonzero()[0].item()
        msg += f"; first y at flat {i}: got 0x{bits(y).flatten()[i].item() & 0xFF:02x} want 0x{bits(ry).flatten()[i].item() & 0xFF:02x}"
    if ns:
        i = ds.flatten().nonzero()[0].item()
        msg += f"; first s at {i}: got {s.flatten()[i].float().item()!r} want {rs.flatten()[i].float().item()!r}"
    return msg


def references(x) -> dict:
    """CPU references (the spec) for every format and fp4, moved to the device once; plus a
    diagnostic: does the reference computed on the GPU agree with the CPU one?"""
    import torch

    from lowbit.ops.act_quant.reference import act_quant_ref, fp4_act_quant_ref

    xc = x.cpu()
    refs, diag = {}, {}
    for fmt in FMTS + [E8M0_FMT]:
        t = time.monotonic()
        ry, rs = act_quant_ref(xc, BS, fmt[0], fmt[1])
        refs[fmt] = (ry.to(DEVICE), rs.to(DEVICE))
        if DEVICE == "cuda":
            gy, gs = act_quant_ref(x, BS, fmt[0], fmt[1])
            diag[fmt_name(fmt)] = mismatch(gy, gs, *refs[fmt]) or "equal"
            del gy, gs
        log(f"reference {fmt_name(fmt)}: {time.monotonic() - t:.1f}s; GPU-computed reference vs CPU: {diag.get(fmt_name(fmt), '-')}")
    for fmt in FP4_FMTS:
        t = time.monotonic()
        rq, rs = fp4_act_quant_ref(xc, fmt[1], fmt[0])
        refs[("fp4", fmt)] = (rq.to(DEVICE), rs.to(DEVICE))
        log(f"reference fp4_act_quant {fmt}: {time.monotonic() - t:.1f}s")
    del xc
    if DEVICE == "cuda":
        torch.cuda.empty_cache()
    return {"refs": refs, "gpu_ref_vs_cpu_ref": diag}


# ---------------------------------------------------------------------------------------- timing
def timers():
    """(do_bench timer, cold-L2 benchmark timer, copy bandwidth) on the GPU; wall clock for --smoke."""
    if DEVICE == "cuda":
        from lowbit.bench.gemm import cold_us
        from lowbit.bench.timing import copy_bandwidth_gbps, time_us

        return time_us, cold_us, copy_bandwidth_gbps

    def cpu_us(fn, graph=False):
        fn()
        ts = []
        for _ in range(3):
            t = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t)
        return sorted(ts)[1] * 1e6

    return cpu_us, cpu_us, lambda: 1.0


def row(op, cfg, fmt, us, nb, base, status) -> dict:
    gbps = nb / us / 1e3 if us else float("nan")
    return dict(op=op, cfg=cfg_name(cfg) if cfg else "-", config=list(cfg) if cfg else None,
                fmt=fmt_name(fmt) if isinstance(fmt, tuple) else fmt, us=us, gbps=gbps,
                pct_copy=100 * gbps / base["copy_gbps"], pct_clone=100 * gbps / base["clone_gbps"],
                pct_copy_same=100 * gbps / base["copy_same_gbps"], clone_ratio=base["clone_us"] / us if us else float("nan"),
                status=status)


def print_table(rows, title):
    print(f"\n{title}")
    print(f"  {'config':34s} {'format':14s} {'us':>8s} {'GB/s':>7s} {'%copy':>6s} {'%clone':>6s} {'%cpy_':>6s} {'clone/us':>8s}  status")
    for r in rows:
        if r.get("us") is None:
            print(f"  {r['cfg']:34s} {r['fmt']:14s} {'-':>8s} {'-':>7s} {'-':>6s} {'-':>6s} {'-':>6s} {'-':>8s}  {r['status']}")
            continue
        print(f"  {r['cfg']:34s} {r['fmt']:14s} {r['us']:8.1f} {r['gbps']:7.0f} {r['pct_copy']:6.1f} {r['pct_clone']:6.1f} "
              f"{r['pct_copy_same']:6.1f} {r['clone_ratio']:7.2f}x  {r['status']}")


def sweep(args) -> dict:
    import torch

    workers = [] if DEVICE != "cuda" or args.workers <= 0 else start_workers(args.workers, args.quick)
    if workers:
        log(f"{len(workers)} compile workers started ({len(jobs(QUICK, FP4_QUICK) if args.quick else jobs(CFGS))} candidates)")
    cfgs = QUICK if args.quick else CFGS
    x = make_x()
    out = {"shape": list(SHAPE), "device": torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu",
           "torch": torch.__version__}
    ref = references(x)
    refs = ref["refs"]
    out["gpu_ref_vs_cpu_ref"] = ref["gpu_ref_vs_cpu_ref"]
    failed = wait_workers(workers, args.compile_timeout) if workers else {}
    for k, e in failed.items():
        log("compile/run FAILED", k[0], cfg_name(C(*k[1])), fmt_name(k[2]) if k[2] else "", e)
    time_us, cold_us, copy_bw = timers()

    # ceilings, same run
    numel = x.numel()
    dst = torch.empty_like(x)
    base = dict(copy_gbps=copy_bw())
    base["clone_us"] = time_us(lambda: x.clone())
    base["copy_same_us"] = time_us(lambda: dst.copy_(x))
    base["clone_gbps"] = numel * 4 / base["clone_us"] / 1e3
    base["copy_same_gbps"] = numel * 4 / base["copy_same_us"] / 1e3
    out["baselines"] = base
    log(f"copy_bandwidth_gbps() {base['copy_gbps']:.0f} GB/s; x.clone() {base['clone_us']:.1f} us "
        f"({base['clone_gbps']:.0f} GB/s); dst.copy_(x) {base['copy_same_us']:.1f} us ({base['copy_same_gbps']:.0f} GB/s)")

    rows = []
    for fmt in FMTS:
        ry, rs = refs[fmt]
        for cfg in cfgs:
            if ("fp8", tuple(cfg), fmt) in failed:
                rows.append(dict(row("fp8", cfg, fmt, None, 0, base, "ERROR"), error=failed[("fp8", tuple(cfg), fmt)]))
                continue
            try:
                y, s = run_fp8(x, cfg, fmt)
                bad = mismatch(y, s, ry, rs)
                del y, s
                us = time_us(lambda: run_fp8(x, cfg, fmt))
            except Exception as e:
                rows.append(dict(row("fp8", cfg, fmt, None, 0, base, "ERROR"), error=f"{type(e).__name__}: {str(e)[:300]}"))
                continue
            r = row("fp8", cfg, fmt, us, nbytes(numel, fmt), base, "ok" if bad is None else "INVALID")
            if bad:
                r["mismatch"] = bad
            rows.append(r)
            log(f"  {cfg_name(cfg):34s} {fmt_name(fmt):14s} {us:7.1f} us {r['pct_copy']:5.1f}% of copy  {r['status']}"
                + (f" ({bad})" if bad else ""))
    out["rows"] = rows

    # best per format; the e8m0-bytes format and the benchmark timer for the best few
    best = {}
    for fmt in FMTS:
        ok = sorted((r for r in rows if r["fmt"] == fmt_name(fmt) and r["status"] == "ok"), key=lambda r: r["us"])
        best[fmt_name(fmt)] = ok[:3]
    out["best"] = {k: [r["cfg"] for r in v] for k, v in best.items()}
    top = list(dict.fromkeys([C(*ACT_QUANT_CONFIG)] + [C(*r["config"]) for v in best.values() for r in v[:2]]))
    extra = []
    ry, rs = refs[E8M0_FMT]
    for cfg in top:
        try:
            y, s = run_fp8(x, cfg, E8M0_FMT)
            bad = mismatch(y, s, ry, rs)
            del y, s
            us = time_us(lambda: run_fp8(x, cfg, E8M0_FMT))
        except Exception as e:
            extra.append(dict(row("fp8", cfg, E8M0_FMT, None, 0, base, "ERROR"), error=f"{type(e).__name__}: {str(e)[:300]}"))
            continue
        extra.append(dict(row("fp8", cfg, E8M0_FMT, us, nbytes(numel, E8M0_FMT), base, "ok" if bad is None else "INVALID"),
                          **({"mismatch": bad} if bad else {})))
    out["e8m0_rows"] = extra

    # the benchmark rows' timer (cold_us: L2 flushed by reading) on the best configs, the public
    # act_quant(x) with the table config and the clone, same run
    from lowbit.ops.act_quant import act_quant

    cold = []
    clone_cold = cold_us(lambda: x.clone())
    cbase = dict(base, clone_us=clone_cold, clone_gbps=numel * 4 / clone_cold / 1e3)
    cold.append(dict(row("clone", None, "x.clone()", clone_cold, numel * 4, cbase, "-"), cfg="x.clone()"))
    for fmt in FMTS:
        cold.append(dict(row("fp8", None, fmt, cold_us(lambda: act_quant(x, BS, fmt[0])), nbytes(numel, fmt), cbase, "public API"),
                         cfg="act_quant(x) (table config)"))
        for r in best[fmt_name(fmt)]:
            cfg = C(*r["config"])
            cold.append(row("fp8", cfg, fmt, cold_us(lambda: run_fp8(x, cfg, fmt)), nbytes(numel, fmt), cbase, "ok"))
    out["cold_rows"] = cold

    # fp4_act_quant: MXFP4 (UE8M0 per 32) and E4M3 scales per 16
    f4 = []
    fp4_cfgs = FP4_QUICK if args.quick else FP4_CFGS
    for fmt in FP4_FMTS:
        rq, rs4 = refs[("fp4", fmt)]
        fname = f"{fmt[0]}/{fmt[1]}"
        for cfg in fp4_cfgs:
            if not fp4_runs(cfg, fmt):
                continue
            if ("fp4", tuple(cfg), fmt) in failed:
                f4.append(dict(row("fp4", None, fname, None, 0, base, "ERROR"), cfg=fp4_cfg_name(cfg), config=list(cfg),
                               error=failed[("fp4", tuple(cfg), fmt)]))
                continue
            try:
                q, s = run_fp4(x, cfg, fmt)
                bad = mismatch(q, s.view(torch.uint8), rq, rs4.view(torch.uint8))
                if bad and fmt[0] == "e4m3":  # a NaN scale's sign bit is the platform's: compare NaN as NaN
                    nan = lambda t: torch.where((t.view(torch.uint8) & 0x7F) == 0x7F, 0x7F, t.view(torch.uint8))  # noqa: E731
                    bad = mismatch(q, nan(s), rq, nan(rs4))
                del q, s
                us = time_us(lambda: run_fp4(x, cfg, fmt))
            except Exception as e:
                f4.append(dict(row("fp4", None, fname, None, 0, base, "ERROR"), cfg=fp4_cfg_name(cfg), config=list(cfg),
                               error=f"{type(e).__name__}: {str(e)[:300]}"))
                continue
            r = dict(row("fp4", None, fname, us, fp4_nbytes(numel, fmt[1]), base, "ok" if bad is None else "INVALID"),
                     cfg=fp4_cfg_name(cfg), config=list(cfg), **({"mismatch": bad} if bad else {}))
            f4.append(r)
            log(f"  fp4 {r['cfg']:28s} {fname:9s} {us:7.1f} us {r['pct_copy']:5.1f}% of copy  {r['status']}"
                + (f" ({bad})" if bad else ""))
    out["fp4_rows"] = f4

    # report
    for fmt in FMTS:
        print_table(sorted((r for r in rows if r["fmt"] == fmt_name(fmt)), key=lambda r: (r.get("us") is None, r.get("us") or 0)),
                    f"act_quant {list(SHAPE)} bf16, {fmt_name(fmt)} (time_us = do_bench, L2 flushed; sorted)")
    print_table(extra, "UE8M0 byte scales (float8_e8m0fnu), the table config and the best configs")
    print_table(cold, "cold_us (the benchmark rows' timer: L2 flushed by reading); clone/us and %clone vs this clone")
    for fmt in FP4_FMTS:
        print_table(sorted((r for r in f4 if r["fmt"] == f"{fmt[0]}/{fmt[1]}"), key=lambda r: (r.get("us") is None, r.get("us") or 0)),
                    f"fp4_act_quant {list(SHAPE)} bf16, e2m1 + {fmt[0]} scale per {fmt[1]} (time_us; sorted)")
    print(f"\nceilings: copy_bandwidth_gbps() {base['copy_gbps']:.0f} GB/s (75% = {0.75 * base['copy_gbps']:.0f}); "
          f"x.clone() {base['clone_us']:.1f} us = {base['clone_gbps']:.0f} GB/s; dst.copy_(x) {base['copy_same_us']:.1f} us = "
          f"{base['copy_same_gbps']:.0f} GB/s")
    print(f"GPU-computed reference vs the CPU reference (diagnostic only): {out['gpu_ref_vs_cpu_ref']}")
    table = [r for r in rows if r["cfg"] == cfg_name(C(*ACT_QUANT_CONFIG))]
    for fmt in FMTS:
        b = best[fmt_name(fmt)]
        t = next((r for r in table if r["fmt"] == fmt_name(fmt)), None)
        if b:
            print(f"BEST {fmt_name(fmt)}: {b[0]['cfg']} = {tuple(b[0]['config'])}: {b[0]['us']:.1f} us, "
                  f"{b[0]['pct_copy']:.1f}% of copy bandwidth, {b[0]['clone_ratio']:.2f}x clone time"
                  + (f" (table config {t['cfg']}: {t['us']:.1f} us, {t['pct_copy']:.1f}%, {t['status']})" if t and t.get("us") else ""))
        else:
            print(f"BEST {fmt_name(fmt)}: no valid config")
    both = {}
    for r in rows:
        if r["status"] == "ok":
            both.setdefault(r["cfg"], {})[r["fmt"]] = r
    joint = [(max(v[fmt_name(f)]["us"] for f in FMTS), k, v) for k, v in both.items() if len(v) == len(FMTS)]
    if joint:
        us, k, v = min(joint, key=lambda t: t[0])
        cfg = tuple(next(iter(v.values()))["config"])
        print(f"BEST for both formats (lowest worst-case time): {k} = {cfg}; worst {us:.1f} us = "
              f"{min(r['pct_copy'] for r in v.values()):.1f}% of copy bandwidth")
        out["best_joint"] = dict(cfg=k, config=list(cfg), worst_us=us)
    # fp4: best per format, and the line to paste (lowest worst-case time over both formats)
    ok4 = {(r["fmt"], tuple(r["config"])): r for r in f4 if r["status"] == "ok"}
    table4 = F4(*FP4_ACT_QUANT_CONFIG)
    for fmt in FP4_FMTS:
        fname = f"{fmt[0]}/{fmt[1]}"
        b = sorted((r for (f, _), r in ok4.items() if f == fname), key=lambda r: r["us"])
        t = ok4.get((fname, tuple(table4)))
        if b:
            print(f"BEST fp4 {fname}: {b[0]['cfg']} = {tuple(b[0]['config'])}: {b[0]['us']:.1f} us, {b[0]['pct_copy']:.1f}% of copy "
                  f"bandwidth" + (f" (table config {t['cfg']}: {t['us']:.1f} us, {t['pct_copy']:.1f}%)" if t else ""))
        else:
            print(f"BEST fp4 {fname}: no valid config")
    joint4 = []
    for cfg in fp4_cfgs:
        rs_ = [ok4.get((f"{fmt[0]}/{fmt[1]}", tuple(fp4_twin(cfg, fmt)))) for fmt in FP4_FMTS]
        if all(rs_):
            joint4.append((max(r["us"] for r in rs_), rs_[0]["us"], cfg, rs_))
    if joint4:
        worst, _, cfg, rs_ = min(joint4, key=lambda t: (t[0], t[1]))
        print(f"BEST fp4 for both formats (lowest worst-case time): {fp4_cfg_name(cfg)}: "
              + ", ".join(f"{r['fmt']} {r['us']:.1f} us = {r['pct_copy']:.1f}% of copy" for r in rs_))
        print(f"paste into lowbit/ops/act_quant/triton.py:  FP4_ACT_QUANT_CONFIG = {tuple(cfg)}")
        out["fp4_best_joint"] = dict(cfg=fp4_cfg_name(cfg), config=list(cfg), worst_us=worst)
    else:
        print("BEST fp4 for both formats: no config valid in both")
    out["elapsed_s"] = time.monotonic() - T0
    return out


# ----------------------------------------------------------------------------- offline compile check
def compile_only() -> int:
    """Compile every candidate for sm_90 without a GPU; print registers / shared memory / spills and
    what the SASS does per thread: 16-byte loads, cp.async, per-element divisions (MUFU.RCP)."""
    from sm90_offline import compile_sm90, resource_usage, root_cause, sass_opcodes

    from lowbit.ops.act_quant import triton as aq

    n_fail = 0
    only_fp4 = os.environ.get("TUNE_FP4_ONLY") == "1"  # skip the FP8 candidates
    todo = jobs(CFGS) + [("fp8", cfg, E8M0_FMT) for cfg in CFGS[:3]]
    for op, cfg, fmt in [j for j in todo if j[0] == "fp4" or not only_fp4]:
        bg = max(1, cfg.elems // (BS if op == "fp8" else fmt[1]))
        if op == "fp8":
            fn = aq._act_quant_kernel
            sig = {"x_ptr": "*bf16", "y_ptr": "*fp8e4nv", "s_ptr": "*u8" if fmt[1] else "*fp32", "n_groups": "i32", "n_blocks": "i32"}
            const = dict(BS=BS, BLOCK_G=bg, UE8M0=fmt[0] == "ue8m0", S_E8M0=fmt[1], INPLACE=False, PERSISTENT=cfg.persistent > 0,
                         STAGES=cfg.stages, EVICT=cfg.evict, FAST=bool(cfg.fast), INTERPRET=False)
        else:
            e4m3 = fmt[0] == "e4m3"
            fn = aq._fp4_fast_kernel if cfg.fast else aq._fp4_act_quant_kernel
            sig = {"x_ptr": "*bf16", "q_ptr": "*u8", "s_ptr": "*fp8e4nv" if e4m3 else "*u8", "n_groups": "i32"}
            const = dict(BS=fmt[1], BLOCK_G=bg, E4M3_SCALE=e4m3, INPLACE=False, INTERPRET=False)
            if cfg.fast:
                const.update(MARKSTEIN=cfg.fast >= 2, EVICT=cfg.evict)
        # the launch specializes every argument of the benchmark shape as divisible by 16
        divisible = range(len(sig))
        name = f"{op} {cfg_name(cfg) if op == 'fp8' else fp4_cfg_name(cfg):34s} {fmt_name(fmt) if op == 'fp8' else f'{fmt[0]}/{fmt[1]}':14s}"
        t = time.monotonic()
        try:
            k = compile_sm90(fn, sig, const, divisible, cfg.warps)
            res = resource_usage(k)
            ops = sass_opcodes(k)
            ldg = sorted({o for o in ops if o.startswith("LDG")})
            stg = sorted({o for o in ops if o.startswith("STG")})
            n = {key: sum(o.startswith(key) for o in ops) for key in ("LDGSTS", "MUFU.RCP", "FCHK", "BAR", "STS", "LDS")}
            # flush-to-zero fp32 arithmetic would break the exact-reciprocal argument for subnormal quotients
            ftz = len(re.findall(r"\.ftz\.f32", k.asm["ptx"]))
            print(f"{name} {res} shared {k.metadata.shared:6d}  SASS {len(ops):4d} instr  loads {ldg} stores {stg} "
                  f"cp.async {n['LDGSTS']} rcp {n['MUFU.RCP']} fchk {n['FCHK']} bar {n['BAR']} sts/lds {n['STS']}/{n['LDS']} "
                  f"ptx-ftz {ftz}  {time.monotonic() - t:.1f}s", flush=True)
        except Exception as e:
            n_fail += 1
            print(f"{name} FAILED {root_cause(e)}", flush=True)
    print(f"{'all compiled' if not n_fail else f'{n_fail} FAILED'} ({time.monotonic() - T0:.0f}s)")
    return 1 if n_fail else 0


def smoke(args) -> int:
    """CPU self-test of the sweep path: Triton interpreter, a tiny x, a few candidates, no workers."""
    global DEVICE, SHAPE, CFGS, QUICK, FP4_QUICK
    DEVICE = "cpu"
    SHAPE = (4, 2048)
    QUICK = [C(*ACT_QUANT_CONFIG), C(512, 4, fast=True), C(256, 2, persistent=1, stages=2, evict=1, fast=True)]
    FP4_QUICK = [F4(*FP4_ACT_QUANT_CONFIG), F4(512, 4, 1), F4(256, 2, 2, 1)]
    args.quick, args.workers = True, 0
    out = sweep(args)
    assert out["rows"] and all(r["status"] == "ok" for r in out["rows"] + out["e8m0_rows"] + out["fp4_rows"]), out
    json.dumps(out)
    print("smoke OK")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", default=None, help="write every row, the ceilings and the best configs here")
    ap.add_argument("--workers", type=int, default=8, help="compile worker processes (0: compile in the timing loop)")
    ap.add_argument("--compile-timeout", type=float, default=240.0)
    ap.add_argument("--quick", action="store_true", help=f"only {len(QUICK)} candidates")
    ap.add_argument("--compile-only", action="store_true")
    ap.add_argument("--smoke", action="store_true", help="CPU self-test of the script (needs TRITON_INTERPRET=1)")
    ap.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--worker-out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.compile_only:
        return compile_only()
    if args.smoke:
        return smoke(args)
    if args.worker is not None:
        worker(args.worker, args.workers, args.worker_out, args.quick)
        return 0
    try:
        out = sweep(args)
    except Exception:
        log("sweep failed:\n" + traceback.format_exc())
        return 1
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1, default=str)
        log(f"wrote {args.json}")
    log("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
