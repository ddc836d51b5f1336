"""Sweep the launch-time variants of the hc = 4 ``hc_split_sinkhorn`` kernel on a GPU.

Shape: 16384 (b, s) rows, hc = 4, 20 Sinkhorn iterations, eps = 1e-6 (``lowbit bench``'s case).
Run from the repository root on the CUDA machine::

    PYTHONPATH=$PWD python scripts/tune_sinkhorn.py [--json PATH] [--budget 90] [--cold]
    python scripts/tune_sinkhorn.py --compile-only   # no GPU: compile every candidate for sm_90,
        # print registers / spills / shared memory and SASS counts (instructions, MUFU, vector LDG/STG)
    python scripts/tune_sinkhorn.py --dry            # no GPU: this script's plumbing on 64 rows
        # under the Triton interpreter (wall-clock "timings", a few candidates)

1. compiles every candidate once, in parallel worker processes (Triton's disk cache then serves
   the timing process) while the main process measures copy bandwidth and builds the references;
   a config that fails to compile is reported and skipped;
2. checks each candidate against the fp64 PyTorch reference on the timed inputs and on a stress
   input (logits x8: near-one-hot softmax, slow Sinkhorn): INVALID when the max abs error over
   pre / post / comb reaches the test tolerance (2e-5, tests/ops/test_hc_sinkhorn.py) or is NaN;
3. times it by CUDA-graph replay over rotating input copies (as ``lowbit bench``'s
   ``hc_split_sinkhorn`` does: 16 copies, 25 MB, L2-resident like a producer's fresh output;
   ``--cold`` uses > 4x L2 of copies), next to the one-pass floor (bytes / measured copy bandwidth)
   and the launch floor (graph replay of a 1-element fill);
4. round 2 sweeps BLOCK_R x num_warps and JOIN_STORE around the two best of round 1 (round 1 has
   every arithmetic x I/O variant at the default launch, and the launch grid for two of them),
   then re-times the top five and the default three more times (median) and prints the best
   valid config as a dict literal for ``HC4_CONFIG`` in ``lowbit/ops/hc_sinkhorn/triton.py`` (set
   by hand). The whole run is bounded by ``--budget`` seconds (90: phases that would not fit are
   cut short and say so).

The candidates are config dicts for ``hc_split_sinkhorn_triton(..., config=...)``; keys and
their defaults are ``HC4_DEFAULTS`` in ``lowbit/ops/hc_sinkhorn/triton.py``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

ROWS, HC, ITERS, EPS = 16384, 4, 20, 1e-6
DEVICE = "cuda"  # "cpu" under --dry
WIDTH = (2 + HC) * HC
TOL = 2e-5  # tests/ops/test_hc_sinkhorn.py ATOL
T0 = time.monotonic()

# (FAST_RCP, SCALED, PAIR_RCP) and (FLAT_ROWS, VEC_LOAD, JOIN_STORE) axes; (BLOCK_R, num_warps)
# with one row per lane (BLOCK_R = 32 * num_warps: 512 warps, about one per SM sub-partition) or
# two (more ILP, half the warps). Fewer rows than lanes only replicate work; 4 rows per lane
# leaves most of the GPU idle (and takes 128+ registers).
ARITH = [(False, False, False), (True, False, False), (False, True, False), (True, True, False), (True, True, True)]
IO = [(False, False, True), (True, False, True), (True, True, True), (True, True, 2)]
LAUNCH = [(32, 1), (64, 1), (64, 2), (128, 2), (128, 4)]


def make_cfg(launch, arith, io) -> dict:
    (br, w), (fast, scaled, pair), (flat, vec, join) = launch, arith, io
    return dict(BLOCK_R=br, num_warps=w, JOIN_STORE=join, FAST_RCP=fast, SCALED=scaled, PAIR_RCP=pair,
                FLAT_ROWS=flat, VEC_LOAD=vec)


def round1() -> list[dict]:
    """The default first; every arithmetic x I/O variant at the default launch; the launch grid for
    the two variants expected to be fastest."""
    from lowbit.ops.hc_sinkhorn.triton import HC4_CONFIG, HC4_DEFAULTS

    out = [{**HC4_DEFAULTS, **HC4_CONFIG}]
    out += [make_cfg((64, 2), a, io) for a in ARITH for io in IO]
    out += [make_cfg(ln, a, (True, True, 2)) for a in ARITH[1::2] for ln in LAUNCH]
    return dedupe(out)


def name(cfg: dict) -> str:
    from lowbit.ops.hc_sinkhorn.triton import HC4_DEFAULTS

    c = {**HC4_DEFAULTS, **cfg}
    s = f"r{c['BLOCK_R']} w{c['num_warps']} join{int(c['JOIN_STORE'])}"
    for k, short in (("FAST_RCP", "rcp"), ("SCALED", "scaled"), ("PAIR_RCP", "pair"), ("FLAT_ROWS", "flat"), ("VEC_LOAD", "vec")):
        if c[k]:
            s += " " + short
    return s


def resolved(cfg: dict, mixes=None):
    """What the launcher really compiles for the benchmark input: (BLOCK_R, kwargs, strides)."""
    import torch

    from lowbit.ops.hc_sinkhorn.triton import hc4_launch

    if mixes is None:
        mixes = torch.empty(1, ROWS, WIDTH, device="meta")
    return hc4_launch(cfg, mixes, EPS)


def dedupe(cfgs: list[dict]) -> list[dict]:
    """Drop configs that resolve to the same kernel and launch (e.g. VEC_LOAD without FLAT_ROWS)."""
    seen, out = set(), []
    for c in cfgs:
        br, kw, _ = resolved(c)
        key = json.dumps([br, kw], sort_keys=True)
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out


def log(*a):
    print(f"[{time.monotonic() - T0:5.1f}s]", *a, flush=True)


# ---------------------------------------------------------------------------------------------
# inputs, calls, parallel warm-up


def make_inputs(scale: float = 1.0):
    import torch

    return (torch.randn(1, ROWS, WIDTH, device=DEVICE) * scale, torch.rand(3, device=DEVICE) + 0.5,
            torch.randn(WIDTH, device=DEVICE) * 0.5)


def call(inp, cfg):
    from lowbit.ops.hc_sinkhorn.triton import hc_split_sinkhorn_triton

    return hc_split_sinkhorn_triton(*inp, HC, ITERS, EPS, config=cfg)


_W = {}


def _warm(cfg):
    """Worker: compile (and run once) one candidate on the benchmark shape."""
    import torch

    try:
        if "inp" not in _W:
            _W["inp"] = make_inputs()
        call(_W["inp"], cfg)
        if DEVICE == "cuda":
            torch.cuda.synchronize()
        return None
    except Exception as e:  # noqa: BLE001 - a config that does not compile is a result
        return f"{type(e).__name__}: {str(e)[-300:]}"


class _Done:
    def __init__(self, value):
        self.value = value

    def get(self, timeout=None):
        return self.value


def warm_start(pool, cfgs: list[dict]) -> list:
    """Start compiling cfgs in the pool (inline without one: --dry)."""
    if pool is None:
        return [(c, _Done(_warm(c))) for c in cfgs]
    return [(c, pool.apply_async(_warm, (c,))) for c in cfgs]


def warm_wait(handles: list, deadline: float) -> dict:
    """{name: error} for the started compiles that failed or did not finish by the deadline."""
    import multiprocessing as mp

    errors = {}
    for c, r in handles:
        try:
            err = r.get(timeout=max(1.0, deadline - time.monotonic()))
        except mp.TimeoutError:
            err = "compile not finished within the budget"
        if err:
            errors[name(c)] = err
    return errors


# ---------------------------------------------------------------------------------------------
# checks and timing


def max_err(out, ref) -> float:
    import math

    err = 0.0
    for a, r in zip(out, ref):
        e = (a.double() - r).abs().max().item()
        if math.isnan(e) or bool(a.isnan().any()):
            return float("nan")
        err = max(err, e)
    return err


def _wall_us(fn, graph=False):
    fn()
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1e6


class Sweep:
    def __init__(self, cold: bool):
        import torch

        from lowbit.bench.timing import L2_BYTES, rotating
        from lowbit.ops.hc_sinkhorn.reference import hc_split_sinkhorn_reference

        if DEVICE == "cuda":
            from lowbit.bench.timing import copy_bandwidth_gbps, time_us
        else:  # --dry: wall clock, a made-up bandwidth
            copy_bandwidth_gbps = lambda: 4000.0  # noqa: E731
            time_us = _wall_us
        self.time_us = time_us
        self.nbytes = ROWS * (WIDTH + HC + HC + HC * HC) * 4  # mixes in; pre, post, comb out
        in_bytes = ROWS * WIDTH * 4
        if cold:
            self.copies = rotating(make_inputs, in_bytes, min_total=4 * L2_BYTES, max_copies=1 << 10)
        else:
            self.copies = rotating(make_inputs, in_bytes)  # lowbit.bench's setting
        self.inp = next(self.copies)
        self.ref = hc_split_sinkhorn_reference(*[t.double() for t in self.inp], HC, ITERS, EPS)
        self.stress = make_inputs(8.0)
        self.stress_ref = hc_split_sinkhorn_reference(*[t.double() for t in self.stress], HC, ITERS, EPS)
        self.copy_gbps = copy_bandwidth_gbps()
        self.floor_us = self.nbytes / (self.copy_gbps * 1e3)
        one = torch.zeros(1, device=DEVICE)
        self.launch_us = time_us(lambda: one.fill_(1.0), graph=True)
        self.rows: dict[str, dict] = {}

    def run(self, cfg: dict, compile_error: str | None = None) -> dict:
        """Check and time one candidate (once); the row is kept in self.rows."""
        n = name(cfg)
        row = dict(name=n, cfg=cfg, us=None, err=None, stress_err=None, valid=False)
        self.rows[n] = row
        if compile_error:
            row["error"] = compile_error
            return row
        try:
            row["err"] = max_err(call(self.inp, cfg), self.ref)
            row["stress_err"] = max_err(call(self.stress, cfg), self.stress_ref)
            row["valid"] = row["err"] < TOL and row["stress_err"] < TOL  # NaN compares False
            row["us"] = self.time_us(lambda: call(next(self.copies), cfg), graph=True)
            row["times"] = [row["us"]]
        except Exception as e:  # noqa: BLE001
            row["error"] = f"{type(e).__name__}: {str(e)[-300:]}"
        return row

    def retime(self, n: str, times: int) -> None:
        import statistics

        row = self.rows[n]
        cfg = row["cfg"]
        for _ in range(times):
            row["times"].append(self.time_us(lambda: call(next(self.copies), cfg), graph=True))
        row["us"] = statistics.median(row["times"])

    def print_row(self, row: dict) -> None:
        if row.get("error"):
            log(f"  {row['name']:38s} ERROR {row['error']}")
            return
        tag = "" if row["valid"] else "  INVALID"
        us = row["us"]
        log(f"  {row['name']:38s} {us:7.2f} us  floor {self.floor_us:5.2f}  x{us / self.floor_us:5.2f}"
            f"  err {row['err']:.1e} stress {row['stress_err']:.1e}{tag}")

    def ranked(self) -> list[dict]:
        return sorted((r for r in self.rows.values() if r["valid"] and r["us"] is not None), key=lambda r: r["us"])


# ---------------------------------------------------------------------------------------------
# offline compile check


def _compile_one(cfg: dict) -> str:
    from sm90_offline import compile_sm90, resource_usage, root_cause, sass_opcodes

    from lowbit.ops.hc_sinkhorn import triton as hk

    t = time.monotonic()
    br, kw, (sb, ss, sk) = resolved(cfg)
    opts = {k: kw.pop(k) for k in ("num_warps", "num_stages") if k in kw}
    names = ["mixes_ptr", "scale_ptr", "base_ptr", "pre_ptr", "post_ptr", "comb_ptr", "R", "S",
             "stride_mb", "stride_ms", "stride_mk", "eps"]
    sig = {p: "*fp32" for p in names[:6]}
    sig.update(R="i32", S="i32", stride_mb="i32", stride_ms="i32", stride_mk="i32", eps="fp32")
    const = dict(ITERS=ITERS, BLOCK_R=br, **kw)
    # what the JIT specializes at launch: an int arg == 1 becomes a constant, pointers and ints
    # divisible by 16 get the divisibility attribute
    vals = dict(R=ROWS, S=ROWS, stride_mb=sb, stride_ms=ss, stride_mk=sk)
    for p, v in vals.items():
        if v == 1:
            sig[p] = "constexpr"
            const[p] = 1
    div = [i for i, p in enumerate(names) if i < 6 or (p in vals and vals[p] != 1 and vals[p] % 16 == 0)]
    try:
        k = compile_sm90(hk._hc4_sinkhorn_kernel, sig, const, div, opts.get("num_warps", 4), opts.get("num_stages"))
    except Exception as e:  # noqa: BLE001
        return f"{name(cfg):38s} FAILED {root_cause(e)}"
    res = resource_usage(k)
    ops = sass_opcodes(k)
    count = lambda pre: sum(o.startswith(pre) for o in ops)  # noqa: E731
    vec = lambda op: sum(o.startswith(op) and o.endswith(".128") for o in ops)  # noqa: E731
    return (f"{name(cfg):38s} {res:34s} sass {len(ops):5d}  MUFU {count('MUFU'):3d}  LDG {count('LDG'):2d} "
            f"(128b {vec('LDG'):2d})  STG {count('STG'):2d} (128b {vec('STG'):2d})  {time.monotonic() - t:4.1f}s")


def compile_only(workers: int) -> int:
    """Compile every candidate (both rounds' launch grid included) for sm_90 without a GPU."""
    os.environ.pop("TRITON_INTERPRET", None)
    cfgs = round1()
    cfgs = dedupe(cfgs + [make_cfg(ln, a, io) for a in ARITH for io in IO[2:4] for ln in LAUNCH]
                  + [make_cfg((64, 2), a, (True, True, False)) for a in ARITH])
    log(f"compiling {len(cfgs)} variants for sm_90 ({workers} processes)")
    if workers > 1:
        import multiprocessing as mp

        with mp.get_context("spawn").Pool(workers) as pool:
            lines = pool.imap(_compile_one, cfgs)
            for line in lines:
                log(line)
    else:
        for c in cfgs:
            log(_compile_one(c))
    return 0


# ---------------------------------------------------------------------------------------------
# main


def main() -> int:
    global DEVICE, ROWS
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", default=None, help="write every row here")
    ap.add_argument("--budget", type=float, default=90.0, help="seconds for the whole run (GPU mode)")
    ap.add_argument("--cold", action="store_true", help="rotate > 4x L2 of input copies (L2-cold inputs)")
    ap.add_argument("--workers", type=int, default=min(14, max(1, (os.cpu_count() or 2) - 2)))
    ap.add_argument("--compile-only", action="store_true")
    ap.add_argument("--dry", action="store_true", help="CPU self-test of this script (Triton interpreter)")
    args = ap.parse_args()
    if args.compile_only:
        return compile_only(args.workers)
    if args.dry:
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
        DEVICE, ROWS = "cpu", 64

    import multiprocessing as mp

    import torch

    import lowbit
    from lowbit.ops.hc_sinkhorn.triton import HC4_CONFIG, HC4_DEFAULTS

    if args.dry:
        lowbit.set_backend("triton")
    deadline = T0 + args.budget
    cand = round1()
    if args.dry:
        cand = cand[:2] + [c for c in cand if c["SCALED"] and c["VEC_LOAD"]][:1]
    pool = None if args.dry else mp.get_context("spawn").Pool(args.workers)
    log(f"round 1: compiling {len(cand)} candidates in {args.workers if pool else 0} worker processes")
    handles = warm_start(pool, cand)
    sw = Sweep(args.cold)  # meanwhile: bandwidth, launch floor, references
    log("device", torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu (dry)", "torch", torch.__version__)
    log(f"copy {sw.copy_gbps:.0f} GB/s: one pass over {sw.nbytes / 1e6:.2f} MB = {sw.floor_us:.2f} us; "
        f"launch floor (graph replay, 1-element fill) {sw.launch_us:.2f} us")
    errors = warm_wait(handles, T0 + 0.45 * args.budget)
    log(f"compiled, {len(errors)} failures")
    default_name = name(HC4_CONFIG)
    for c in cand:
        if time.monotonic() > deadline - 25:
            log("budget: rest of round 1 skipped")
            break
        sw.print_row(sw.run(c, errors.get(name(c))))

    # round 2: the launch grid and the comb store around the two best of round 1
    top = sw.ranked()[:2]
    cand2 = []
    for r in top:
        c = {**HC4_DEFAULTS, **r["cfg"]}
        cand2 += [dict(c, BLOCK_R=br, num_warps=w) for br, w in LAUNCH]
        cand2 += [dict(c, JOIN_STORE=j) for j in (False, True, 2)]
    cand2 = [c for c in dedupe(cand2) if name(c) not in sw.rows]
    if args.dry:
        cand2 = cand2[:1]
    errors2 = {}
    if cand2 and time.monotonic() < deadline - 20:
        log(f"round 2: {len(cand2)} candidates around {[r['name'] for r in top]}")
        errors2 = warm_wait(warm_start(pool, cand2), deadline - 15)
        for c in cand2:
            if time.monotonic() > deadline - 8:
                log("budget: rest of round 2 skipped")
                break
            sw.print_row(sw.run(c, errors2.get(name(c))))
    if pool is not None:
        pool.terminate()

    # confirm: the top five and the default, three more timings each, median
    final = [r["name"] for r in sw.ranked()[:5]]
    if default_name in sw.rows and default_name not in final:
        final.append(default_name)
    for n in final:
        if time.monotonic() < deadline - 2 and sw.rows[n]["us"] is not None:
            sw.retime(n, 3)
    log("final (median of up to 4 timings each):")
    for n in sorted(final, key=lambda n: sw.rows[n]["us"] or 1e9):
        sw.print_row(sw.rows[n])
    base = sw.rows.get(default_name, {}).get("us")
    ranked = sw.ranked()
    best = ranked[0] if ranked else None
    if best is not None:
        cfg = {**HC4_DEFAULTS, **best["cfg"]}
        speed = f"; x{base / best['us']:.2f} faster than the default ({base:.2f} us)" if base else ""
        log(f"BEST {best['name']}: {best['us']:.2f} us = x{best['us'] / sw.floor_us:.2f} the one-pass floor{speed}")
        print("HC4_CONFIG = dict(" + ", ".join(f"{k}={v!r}" for k, v in cfg.items()) + ")")
        print(repr(cfg))
    else:
        log("no valid candidate")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(rows=list(sw.rows.values()), copy_gbps=sw.copy_gbps, floor_us=sw.floor_us,
                           launch_us=sw.launch_us, nbytes=sw.nbytes, cold=args.cold,
                           compile_errors={**errors, **errors2}, best=None if best is None else best["cfg"],
                           device=torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu (dry)"),
                      f, indent=1, default=str)
        log("wrote", args.json)
    log(f"done in {time.monotonic() - T0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
