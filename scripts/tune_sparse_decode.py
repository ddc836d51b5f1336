"""Sweep the small-batch decode configs of sparse_attn (fused merge on/off x splits x tiles) on a GPU.

Run from the repository root on the H200 (``PYTHONPATH=$PWD``)::

    python3 scripts/tune_sparse_decode.py [--budget 90] [--rep 10] [--json $OUT/sparse_decode.json]
    python3 scripts/tune_sparse_decode.py --compile-only   # no GPU: compile the candidates for sm_90
    python3 scripts/tune_sparse_decode.py --dry            # no GPU: tiny shapes, Triton interpreter

Shapes: m = 1, d = 512, n = 65536, topk = 2048, b in {1, 2, 4, 8}, h in {64, 128}, plus b1 h64
topk 512 (bf16 KV). Candidates: FUSED_MERGE {off, on} x SPLITS {8, 16, 32, 64} x BLOCK_H {16, 32,
64} x BLOCK_N {32, 64} x num_stages {1, 2} (num_warps 4 for BLOCK_H 16, else 8), pruned: split
counts above the tile count or launching more than 2 waves of programs (the smallest count is
kept), BLOCK_N 32 only for b <= 2. Each candidate is checked against the fp64 reference on the
same inputs (INVALID beyond the test tolerance 2e-2), then timed by CUDA-graph replay over rotating
input copies exactly as lowbit/bench/sparse_attn.py does (``time_us(fn, graph=True)``; the sweep
uses ``rep=--rep`` ms, then the best few per shape, the current default launch and the bf16
PyTorch path ``_torch_bf16_path`` are re-timed at the benchmark's rep = 100). Shapes run in
priority order (b1 h64 first) until ``--budget`` seconds of wall time are used; the candidate
kernels are compiled first in parallel worker processes (Triton's disk cache serves the sweep).

Prints a table per shape (µs, speedup vs the bf16 torch path), the best config per shape and a
suggested ``_TUNED[("small", False)]`` entry (the config with the smallest sum of time / best over
the small-regime shapes). It changes no table: ``_TUNED`` is set by hand from this output.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

T0 = time.monotonic()
TOL = 2e-2  # tests/ops/test_sparse_attn.py
D, N_CACHE = 512, 65536
# (b, h, topk) in priority order
SHAPES = [(1, 64, 2048), (1, 64, 512), (1, 128, 2048), (2, 64, 2048), (2, 128, 2048),
          (4, 64, 2048), (4, 128, 2048), (8, 64, 2048), (8, 128, 2048)]
SPLITS = (8, 16, 32, 64)
BLOCK_HS = (16, 32, 64)
BLOCK_NS = (32, 64)
STAGES = (1, 2)
DRY = False


def log(*a):
    print(f"[{time.monotonic() - T0:6.1f}s]", *a, flush=True)


def warps_for(block_h: int) -> int:
    return 4 if block_h <= 16 else 8


def all_configs():
    for fused in (False, True):
        for bh in BLOCK_HS:
            for bn in BLOCK_NS:
                for st in STAGES:
                    for s in SPLITS:
                        yield dict(BLOCK_H=bh, BLOCK_N=bn, num_warps=warps_for(bh), num_stages=st,
                                   SPLITS=s, FUSED_MERGE=fused)


def candidates(b, h, topk, sms):
    out = []
    for c in all_configs():
        bh = min(c["BLOCK_H"], max(16, 1 << (h - 1).bit_length()))
        if bh != c["BLOCK_H"]:
            continue
        if c["BLOCK_N"] == 32 and b > 2:
            continue
        tiles = math.ceil(topk / c["BLOCK_N"])
        if c["SPLITS"] > tiles:
            continue
        programs = b * math.ceil(h / c["BLOCK_H"]) * c["SPLITS"]
        if programs > 2 * sms and c["SPLITS"] != SPLITS[0]:
            continue
        out.append(c)
    return out


# merge-kernel tiles (COMBINE_H heads x COMBINE_D dims a program) tried on the best two-launch
# configs of each shape (--combine); (8, 128) is the launcher's default
COMBINE_TILES = ((8, 128), (4, 128), (2, 128), (1, 128), (4, 64), (2, 64), (1, 64), (8, 32), (2, 256), (1, 512))


def name(c) -> str:
    if c is None:
        return "-"
    comb = f" C{c['COMBINE_H']}x{c['COMBINE_D']}w{c.get('COMBINE_WARPS', 4)}" if "COMBINE_H" in c else ""
    return (f"{'fused' if c.get('FUSED_MERGE') else '2-launch'} S{c.get('SPLITS', '?')} "
            f"BH{c['BLOCK_H']} BN{c['BLOCK_N']} w{c['num_warps']} st{c['num_stages']}{comb}")


def key(c) -> str:
    return json.dumps(c, sort_keys=True)


# --------------------------------------------------------------------------------------- compile only
def compile_only(only=None) -> int:
    """Compile the decode candidates (split kernel, fused merge on/off, bf16 and FP8 KV) and the
    combine kernel for sm_90 without a GPU, as scripts/tune_gemm.py does; print shared memory and
    the cubin's registers / spills."""
    import re

    from sm90_offline import compile_sm90, resource_usage

    from lowbit.ops.sparse_attn import triton as sk

    def build(fn, sig, const, warps, stages):
        ptrs = [i for i, p in enumerate(fn.arg_names) if p in sig and sig[p].startswith("*")]
        k = compile_sm90(fn, sig, const, ptrs, warps, stages)
        atom = sorted(set(re.findall(r"atom\.[\w.]+", k.asm["ptx"])))
        bars = len(re.findall(r"bar\.sync|barrier\.sync", k.asm["ptx"]))
        return k, resource_usage(k), atom, bars

    failures = 0
    fn = sk._sparse_attn_kernel
    # contiguous tensors: the innermost strides are 1, which the runtime specializes
    UNIT_STRIDES = ("stride_qd", "stride_kd", "stride_sg", "stride_it", "stride_od")
    for fp8 in (False, True):
        for fused in (False, True):
            for bh in BLOCK_HS:
                for bn in BLOCK_NS:
                    for st in STAGES:
                        if only and (fp8, fused, bh, bn, st) not in only:
                            continue
                        sig = {}
                        for p in fn.params:
                            if p.is_constexpr:
                                continue
                            n_ = p.name
                            if n_ in ("q_ptr", "o_ptr"):
                                sig[n_] = "*bf16"
                            elif n_ == "kv_ptr":
                                sig[n_] = "*fp8e4nv" if fp8 else "*bf16"
                            elif n_ == "idx_ptr":
                                sig[n_] = "*i32"
                            elif n_ == "count_ptr":
                                sig[n_] = "*i32" if fused else "*bf16"
                            elif n_.endswith("_ptr"):
                                sig[n_] = "*fp32"
                            elif n_ == "qk_scale":
                                sig[n_] = "fp32"
                            elif n_ in UNIT_STRIDES:  # 1 at run time: Triton specializes it to a constant
                                sig[n_] = "constexpr"
                            else:
                                sig[n_] = "i32"
                        const = dict({u: 1 for u in UNIT_STRIDES}, D=D, D_PAD=D, BLOCK_H=bh, BLOCK_N=bn, GROUP=64 if fp8 else 1, HAS_SCALE=fp8,
                                     SPLIT=True, INTERPRET=False, FUSED_MERGE=fused, MERGE_D=min(D, 8192 // bh))
                        label = f"{'fp8 ' if fp8 else 'bf16'} {name(dict(BLOCK_H=bh, BLOCK_N=bn, num_warps=warps_for(bh), num_stages=st, SPLITS='n', FUSED_MERGE=fused))}"
                        t = time.monotonic()
                        try:
                            k, res, atom, bars = build(fn, sig, const, warps_for(bh), st)
                            print(f"{label:44s} shared {k.metadata.shared:6d}  {res}  atom {atom} bar.sync x{bars}  "
                                  f"{time.monotonic() - t:.1f}s", flush=True)
                        except Exception as e:  # noqa: BLE001 - a config that does not compile is a result
                            failures += 1
                            c = e
                            while c.__cause__ is not None:
                                c = c.__cause__
                            print(f"{label:44s} FAILED {type(c).__name__}: {str(c)[-300:]}", flush=True)
    fn = sk._sparse_attn_combine_kernel
    sig = {p.name: ("*bf16" if p.name == "o_ptr" else "*fp32" if p.name.endswith("_ptr") else
                    "constexpr" if p.name in UNIT_STRIDES else "i32")
           for p in fn.params if not p.is_constexpr}
    try:
        k, res, _, _ = build(fn, sig, dict({u: 1 for u in UNIT_STRIDES if u in sig}, D=D, BLOCK_D=128, BLOCK_H=8), 4, 3)
        print(f"{'combine kernel BH8 BD128 w4':44s} shared {k.metadata.shared:6d}  {res}", flush=True)
    except Exception as e:  # noqa: BLE001
        failures += 1
        print(f"combine kernel FAILED {type(e).__name__}: {str(e)[-300:]}", flush=True)
    print(f"compile-only: {failures} failures")
    return 1 if failures else 0


# --------------------------------------------------------------------------------------- GPU sweep
def _warm_one(cfg):
    """Worker: compile one config by running it on a small split case (sizes are not specialized)."""
    import torch

    from lowbit.ops.sparse_attn.triton import sparse_attn_triton

    try:
        dev = "cpu" if DRY else "cuda"
        d = 64 if DRY else D
        q = torch.randn(1, 1, 64, d, device=dev, dtype=torch.bfloat16)
        kv = torch.randn(1, 4096, d, device=dev, dtype=torch.bfloat16)
        idx = torch.randint(0, 4096, (1, 1, 2048), device=dev, dtype=torch.int32)
        sparse_attn_triton(q, kv, torch.randn(64, device=dev), idx, d**-0.5, config=dict(cfg, SPLITS=8))
        if not DRY:
            torch.cuda.synchronize()
        return None
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {str(e)[:300]}"


def rel_err(out, ref) -> float:
    out64, ref64 = out.double(), ref.double()
    denom = ref64.norm().item()
    diff = (out64 - ref64).norm().item()
    return diff / denom if denom > 0 else diff


def main() -> int:
    global DRY, SHAPES, SPLITS, D, N_CACHE
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--budget", type=float, default=90.0, help="wall seconds for the whole run (shapes in priority order)")
    ap.add_argument("--rep", type=int, default=10, help="ms of graph replay per candidate in the sweep")
    ap.add_argument("--final-rep", type=int, default=100, help="ms for the re-timed best / default / torch rows")
    ap.add_argument("--retime", type=int, default=3, help="re-time the best N candidates of each shape at --final-rep")
    ap.add_argument("--workers", type=int, default=8, help="parallel compile processes (0: compile on first use)")
    ap.add_argument("--json", default=None, help="write every row here")
    ap.add_argument("--combine", type=int, default=0, help="also sweep the merge kernel's tile on the best N two-launch configs")
    ap.add_argument("--shapes", default=None, help="only these shapes, e.g. '1,64,2048;1,128,512' (b,h,topk)")
    ap.add_argument("--compile-only", action="store_true")
    ap.add_argument("--quick", action="store_true", help="with --compile-only: two configs")
    ap.add_argument("--dry", action="store_true", help="tiny shapes on CPU under the Triton interpreter")
    args = ap.parse_args()
    if args.compile_only:
        # --quick: just the current small-regime config and the same with the fused merge
        return compile_only([(False, f, 16, 64, 2) for f in (False, True)] if args.quick else None)
    if args.shapes:
        SHAPES = [tuple(int(v) for v in t.split(",")) for t in args.shapes.split(";")]
    if args.dry:
        DRY = True
        os.environ["TRITON_INTERPRET"] = "1"
        D, N_CACHE = 64, 300
        SHAPES = [(1, 16, 96), (2, 32, 64)]
        SPLITS = (2, 3)

    import torch

    from lowbit.bench.sparse_attn import _torch_bf16_path
    from lowbit.ops.sparse_attn import sparse_attn
    from lowbit.ops.sparse_attn import triton as sk
    from lowbit.ops.sparse_attn.reference import sparse_attn_reference

    dev = torch.device("cpu") if DRY else torch.device("cuda", torch.cuda.current_device())
    sms = 4 if DRY else torch.cuda.get_device_properties(dev).multi_processor_count
    if DRY:
        def time_fn(fn, rep):
            fn()
            t = time.perf_counter()
            fn()
            return (time.perf_counter() - t) * 1e6
    else:
        from lowbit.bench.timing import L2_BYTES, rotating, time_us

        def time_fn(fn, rep):
            return time_us(fn, graph=True, rep=rep)
    log(f"device {dev} ({'interpreter' if DRY else torch.cuda.get_device_name(dev)}), {sms} SMs, budget {args.budget:.0f}s")

    # 1. compile every distinct kernel variant in parallel (the sizes are not specialized)
    variants = {}
    for b, h, topk in SHAPES:
        for c in candidates(b, h, topk, sms):
            v = dict(c)
            v.pop("SPLITS")
            variants[key(v)] = v
    compile_errors = {}
    if args.workers > 0 and not DRY:
        import multiprocessing as mp

        log(f"compiling {len(variants)} kernel variants in {args.workers} processes")
        with mp.get_context("spawn").Pool(args.workers) as pool:
            for k_, err in zip(variants, pool.map(_warm_one, list(variants.values()), chunksize=1)):
                if err:
                    compile_errors[k_] = err
                    log("  compile/run error", k_, err)
        log(f"compiled, {len(compile_errors)} failures")

    rows = []
    baselines = {}
    for b, h, topk in SHAPES:
        shape = f"decode m1 b{b} h{h} top{topk}"
        if time.monotonic() - T0 > args.budget - 8:
            log(f"budget: skipping {shape}")
            continue
        scale = D**-0.5

        def make():
            q = torch.randn(b, 1, h, D, device=dev, dtype=torch.bfloat16)
            kv = torch.randn(b, N_CACHE, D, device=dev, dtype=torch.bfloat16)
            idx = torch.randint(0, N_CACHE, (b, 1, topk), device=dev, dtype=torch.int32)
            idx[..., -topk // 16:] = -1  # as lowbit/bench/sparse_attn.py
            return q, kv, torch.randn(h, device=dev), idx

        if DRY:
            import itertools

            copies = itertools.cycle([make() for _ in range(2)])
        else:
            copies = rotating(make, b * N_CACHE * D * 2 + b * topk * 4, min_total=4 * L2_BYTES)
        inp0 = next(copies)
        q0, kv0, sink0, idx0 = inp0
        ref = sparse_attn_reference(q0.double(), kv0, sink0.double(), idx0, scale)  # fp64, gathers only topk rows

        def ours(cfg):
            q, kv, sink, idx = next(copies)
            return sk.sparse_attn_triton(q, kv, sink, idx, scale, config=cfg)

        # baselines at the benchmark's rep: the bf16 torch path and today's default launch
        def bf16_path():
            q, kv, sink, idx = next(copies)
            return _torch_bf16_path(q, kv, sink, idx, scale)

        def default():
            q, kv, sink, idx = next(copies)
            return sparse_attn(q, kv, sink, idx, scale)

        with __import__("lowbit").backend("triton"):
            default()  # compile outside capture
            torch_us = time_fn(bf16_path, args.final_rep)
            default_us = time_fn(default, args.final_rep)
            default_err = rel_err(sparse_attn(q0, kv0, sink0, idx0, scale), ref)
        baselines[shape] = dict(torch_bf16_us=torch_us, default_us=default_us, default_err=default_err)
        log(f"== {shape}: torch bf16 path {torch_us:.2f} us, lowbit default {default_us:.2f} us "
            f"({torch_us / default_us:.2f}x, err {default_err:.1e})")

        def run_candidate(c):
            """Check config c against the fp64 reference, then time it: one result row."""
            row = dict(shape=shape, b=b, h=h, topk=topk, cfg=c, us=None, err=None, status="ok")
            try:
                err = rel_err(sk.sparse_attn_triton(q0, kv0, sink0, idx0, scale, config=c), ref)
                row["err"] = err
                if not err < TOL:  # NaN too
                    row["status"] = "INVALID"
                else:
                    row["us"] = time_fn(lambda: ours(c), args.rep)
            except Exception as e:  # noqa: BLE001 - a config that fails is a result
                row.update(status="ERROR", err=f"{type(e).__name__}: {str(e)[:200]}")
            return row

        cands = candidates(b, h, topk, sms)
        shape_rows = []
        for i, c in enumerate(cands):
            if time.monotonic() - T0 > args.budget - 5:
                log(f"budget: {len(cands) - i} candidates of {shape} not run")
                break
            v = dict(c)
            v.pop("SPLITS")
            if key(v) in compile_errors:
                row = dict(shape=shape, b=b, h=h, topk=topk, cfg=c, us=None, err=compile_errors[key(v)],
                           status="COMPILE")
            else:
                row = run_candidate(c)
            shape_rows.append(row)
        if args.combine:
            # the merge kernel's tile on the best two-launch configs (its grid is rows x heads /
            # COMBINE_H x D / COMBINE_D programs: 32 at b1 h64 with the default 8 x 128)
            best2 = sorted((r for r in shape_rows if r["us"] is not None and not r["cfg"]["FUSED_MERGE"]),
                           key=lambda r: r["us"])[:args.combine]
            for r0 in best2:
                for ch, cd in COMBINE_TILES[1:]:
                    if time.monotonic() - T0 > args.budget - 5:
                        break
                    # one warp per 128 merged elements, 1-4 warps
                    c = dict(r0["cfg"], COMBINE_H=ch, COMBINE_D=cd, COMBINE_WARPS=max(1, min(4, ch * cd // 128)))
                    shape_rows.append(run_candidate(c))
        # re-time the best few at the benchmark's rep
        timed = sorted((r for r in shape_rows if r["us"] is not None), key=lambda r: r["us"])
        if timed and not DRY and timed[0]["cfg"].get("SPLITS", 1) > 1 and not timed[0]["cfg"]["FUSED_MERGE"]:
            # where the time goes: the best config with its merge kernel replaced by a no-op
            real = sk._sparse_attn_combine_kernel
            sk._sparse_attn_combine_kernel = _NoLaunch()
            try:
                main_us = time_fn(lambda: ours(timed[0]["cfg"]), args.final_rep)
            finally:
                sk._sparse_attn_combine_kernel = real
            log(f"   split kernel alone (merge skipped) of {name(timed[0]['cfg'])}: {main_us:.2f} us")
            baselines[shape]["split_kernel_alone_us"] = main_us
        for r in timed[:args.retime]:
            r["us_sweep"] = r["us"]
            r["us"] = time_fn(lambda: ours(r["cfg"]), args.final_rep)
        for r in shape_rows:
            r["speedup_vs_torch_bf16"] = torch_us / r["us"] if r["us"] else None
        rows += shape_rows
        report(shape, shape_rows, baselines[shape])
        del copies, inp0, q0, kv0, sink0, idx0, ref
        if not DRY:
            torch.cuda.empty_cache()
        if args.json:
            dump(args.json, rows, baselines, compile_errors)

    summary(rows, baselines, sms)
    if args.json:
        dump(args.json, rows, baselines, compile_errors)
        log(f"rows written to {args.json}")
    return 0


class _NoLaunch:
    """Stands in for a kernel: ``k[grid](...)`` launches nothing (timing the other kernel alone)."""

    def __getitem__(self, grid):
        return lambda *args, **kwargs: None


def report(shape, shape_rows, base, top=12):
    ok = sorted((r for r in shape_rows if r["us"] is not None), key=lambda r: r["us"])
    bad = [r for r in shape_rows if r["us"] is None]
    log(f"   {len(ok)} timed, {len(bad)} invalid/failed; top {min(top, len(ok))} (µs, x vs torch bf16 "
        f"{base['torch_bf16_us']:.2f} us; * = re-timed at the final rep):")
    print(f"   {'config':44s} {'µs':>8s} {'x torch':>8s} {'err':>9s}")
    print(f"   {'lowbit default (_TUNED)':44s} {base['default_us']:8.2f} {base['torch_bf16_us'] / base['default_us']:8.2f} "
          f"{base['default_err']:9.1e}")
    for r in ok[:top]:
        print(f"   {name(r['cfg']):44s} {r['us']:8.2f}{'*' if 'us_sweep' in r else ' '}{r['speedup_vs_torch_bf16']:7.2f} "
              f"{r['err']:9.1e}")
    for fused in (False, True):
        best = next((r for r in ok if bool(r["cfg"]["FUSED_MERGE"]) == fused), None)
        if best:
            print(f"   best {'fused' if fused else '2-launch'}: {name(best['cfg'])} {best['us']:.2f} us")
    for r in bad[:6]:
        err = r["err"] if isinstance(r["err"], str) else f"rel_err {r['err']:.2e}"
        print(f"   {r['status']:8s} {name(r['cfg'])}: {err}")
    sys.stdout.flush()


def summary(rows, baselines, sms):
    log("== best config per shape")
    shapes = list(baselines)
    best_of = {}
    print(f"   {'shape':28s} {'torch bf16':>10s} {'default':>8s} {'best':>8s} {'x torch':>8s}  config")
    for s in shapes:
        ok = [r for r in rows if r["shape"] == s and r["us"] is not None]
        base = baselines[s]
        if not ok:
            print(f"   {s:28s} {base['torch_bf16_us']:10.2f} {base['default_us']:8.2f}   (no valid candidate)")
            continue
        best = min(ok, key=lambda r: r["us"])
        best_of[s] = best["us"]
        print(f"   {s:28s} {base['torch_bf16_us']:10.2f} {base['default_us']:8.2f} {best['us']:8.2f} "
              f"{base['torch_bf16_us'] / best['us']:8.2f}  {name(best['cfg'])}")
    # the "small" regime of sparse_attn_triton: rows * ceil(h / 64) < SMALL_P64 (16)
    small = [s for s in shapes if s in best_of and _p64(s) < 16]
    score = {}
    for s in small:
        for r in rows:
            if r["shape"] == s and r["us"] is not None:
                score.setdefault(key(r["cfg"]), []).append(r["us"] / best_of[s])
    full = {k: sum(v) / len(v) for k, v in score.items() if len(v) == len(small)}
    if not full:
        log("no config was valid and timed on every small-regime shape: no suggestion")
        return
    k = min(full, key=full.get)
    cfg = json.loads(k)
    log(f"== small regime ({', '.join(small)}): best common config {name(cfg)}, mean time/best {full[k]:.3f}")
    for s in small:
        r = next(r for r in rows if r["shape"] == s and r["us"] is not None and key(r["cfg"]) == k)
        print(f"   {s:28s} {r['us']:8.2f} us (best {best_of[s]:.2f}, torch bf16 {baselines[s]['torch_bf16_us']:.2f}, "
              f"{baselines[s]['torch_bf16_us'] / r['us']:.2f}x)")
    entry = dict(BLOCK_H=cfg["BLOCK_H"], BLOCK_N=cfg["BLOCK_N"], num_warps=cfg["num_warps"],
                 num_stages=cfg["num_stages"], SPLITS=cfg["SPLITS"], FUSED_MERGE=cfg["FUSED_MERGE"],
                 **{k_: cfg[k_] for k_ in ("COMBINE_H", "COMBINE_D", "COMBINE_WARPS") if k_ in cfg})
    body = ", ".join(f"{a}={b!r}" for a, b in entry.items())
    print(f'   suggested: ("small", False): dict({body}),')
    print("   (a fixed SPLITS overrides the split cost model; drop it and keep MERGE=0.125 to let the model choose)")


def _p64(shape: str) -> int:
    parts = dict((p[0], p[1:]) for p in shape.split()[2:] if p[0] in "bh")
    return int(parts["b"]) * math.ceil(int(parts["h"]) / 64)


def dump(path, rows, baselines, compile_errors):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(dict(rows=rows, baselines=baselines, compile_errors=compile_errors,
                       elapsed_s=time.monotonic() - T0), f, indent=1, default=str)


if __name__ == "__main__":
    sys.exit(main())
