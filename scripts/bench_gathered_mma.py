"""Sweep the tensor-core NVFP4 gathered kernel (``lowbit/ops/gathered/triton_mma.py``) against the
CUDA-core kernel on the benchmark's shapes (V = 131072, K in {256, 1024, 4096}, B in {1, 16, 64,
256}, T in {8, 32, 64}), all in the same run, as ``lowbit/bench/gathered.py`` times them
(``gathered_bias``, CUDA-graph replay over rotating inputs; floor = max(one launch, bytes / copy
bandwidth)). Each config's logits are checked against the CUDA-core kernel's first.

    OUT=results python3 scripts/bench_gathered_mma.py [--rep MS] [--configs 1x2x1x0,...] (RT x W x D x SPLIT; default: auto_configs) [--quick] [--picked] [--variants old] [--min-bt N] [--ks 4096,...]

Writes ``$OUT/gathered_mma_sweep.json`` and prints one line per shape: the CUDA-core kernel, the
default MMA config, the best MMA config, and each against the floor. ``--picked``: only the
table's config. ``--variants old,nopdl,pdl,trigger,o1``: every config also as that kernel variant
(``VARIANTS``: the pre-``LEAN`` kernel, a plain launch, PDL without / with the early trigger,
ptxas -O1),
named ``<config>:<variant>``. ``--min-bt N``: only the shapes with
B * T >= N; ``--ks``: only these K.
"""
from __future__ import annotations

import itertools
import json
import os
import sys

import torch

from lowbit.bench.flags import module_flags
from lowbit.bench.gathered import FULL, QUICK, V
from lowbit.bench.timing import copy_bandwidth_gbps, time_us
from lowbit.formats import NVFP4
from lowbit.ops.gathered import triton as cuda_core
from lowbit.ops.gathered import triton_mma


def arg(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def name(cfg, variant: str = "") -> str:
    return "x".join(str(v) for v in cfg) + (f":{variant}" if variant else "")


#: kernel variants: module flags of ``triton_mma`` set for the launch
VARIANTS = {"": {}, "old": {"LEAN": False}, "nopdl": {"PDL": False}, "pdl": {"PDL": True, "TRIGGER": False},
            "trigger": {"PDL": True, "TRIGGER": True}, "o1": {"PTXAS_OPTIONS": "-O1"}}


def launch_as(variant: str, *args) -> None:
    """``triton_mma.launch(*args)`` as the kernel ``variant`` ("": the shipped dispatch, "old":
    the pre-``LEAN`` kernel everywhere, "nopdl": a plain launch, "pdl": a programmatic dependent
    launch without the early trigger, "trigger": with it, "o1": compiled with ptxas -O1)."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r} (known: {', '.join(v for v in VARIANTS if v)})")
    with module_flags(triton_mma, VARIANTS[variant]):
        triton_mma.launch(*args)


def auto_configs(k: int) -> list[tuple[int, ...]]:
    """(RT, W, D, SPLIT) candidates next to the table's pick (``triton_mma.pick_config``, always
    timed too): the runners-up of docs/measurements/2026-12-01_session6_gathered_sweep4_split.json
    and SPLIT at 16 warps for K = 4096."""
    nch = -(-k // 128)
    if nch <= 2:
        return [(1, 1, 1, 1), (2, 1, 1, 1)]
    if nch <= 8:
        return [(1, 4, 1, 1), (2, 2, 1, 1), (1, 8, 1, 1), (2, 4, 1, 1)]
    return [(1, 8, 1, 1), (1, 16, 1, 1), (2, 8, 1, 1), (1, 8, 1, 0)]


def main():
    out_dir = os.environ.get("OUT", ".")
    rep = int(arg("--rep", "40"))
    given = arg("--configs", "")
    only_picked = "--picked" in sys.argv
    variants = tuple(v for v in arg("--variants", "").split(",") if v)
    fixed = [tuple(int(v) for v in c.split("x")) for c in given.split(",")] if given else None
    shapes = QUICK if "--quick" in sys.argv else FULL
    min_bt = int(arg("--min-bt", "0"))
    shapes = [s for s in shapes if s[1] * s[2] >= min_bt]
    ks = arg("--ks", "")
    if ks:
        shapes = [s for s in shapes if s[0] in {int(v) for v in ks.split(",")}]
    dev = "cuda"
    bw = copy_bandwidth_gbps()
    one = torch.zeros(1, device=dev)
    launch_us = time_us(lambda: one.add_(1.0), graph=True)
    print(f"copy {bw:.0f} GB/s, one launch {launch_us:.2f} us", flush=True)
    rows = []
    for k in sorted({s[0] for s in shapes}):
        w = NVFP4.quantize(torch.randn(V, k, device=dev) * 0.02)
        data, scale, gsc = w.packed, w.scale.view(torch.uint8), w.global_scale
        configs = [] if only_picked else (fixed or auto_configs(k))
        for _, b, t in [s for s in shapes if s[0] == k]:
            inputs = [(torch.randn(b, k, device=dev, dtype=torch.bfloat16), torch.randn(b, t, device=dev),
                       torch.randint(0, V, (b, t), device=dev)) for _ in range(8)]
            logits = torch.full((b, V), float("-inf"), device=dev, dtype=torch.bfloat16)
            nbytes = b * t * (k // 2 + k // 16) + b * k * 2 + b * t * (4 + 8) + b * t * 2
            floor = max(launch_us, nbytes / (bw * 1e3))

            def run(cfg, it, variant=""):
                x, values, idx = next(it)
                if cfg is None:
                    cuda_core.gathered_bias(x, 2, data, scale, gsc, values, idx, logits, 1.0, k, 4, 16,
                                            config=cuda_core.dot_config(b, t))
                else:
                    launch_as(variant, x, data, scale, gsc, idx, k, logits, values, 1.0, True, cfg)

            # correctness first: every config's dots equal the CUDA-core kernel's (within fp32
            # accumulation order; dots, not logits, so duplicate indices cannot pick different writers)
            x, values, idx = inputs[0]
            ref = torch.empty(b, t, device=dev)
            cuda_core._launch_dot(x, 2, data, scale, gsc, idx, k, 4, 16, ref, None, 1.0, False, cuda_core.dot_config(b, t))
            res = {"K": k, "B": b, "T": t, "floor_us": floor, "bytes": nbytes, "mma": {}}
            dflt = triton_mma.pick_config(b, t, k)
            for cfg, var in [(c, o) for c in configs or [dflt] for o in ("",) + variants]:
                got = torch.full_like(ref, float("nan"))
                launch_as(var, x, data, scale, gsc, idx, k, got, None, 1.0, False, cfg)
                err = ((got - ref).abs() / (ref.abs().amax() + 1e-6)).max().item()
                if not err < 1e-4:
                    print(f"  MISMATCH K{k} B{b} T{t} cfg {name(cfg, var)}: err / max|dot| {err}", flush=True)
                    res["mma"][name(cfg, var)] = None
                    continue
                res["mma"][name(cfg, var)] = time_us(lambda c=cfg, o=var, it=itertools.cycle(inputs): run(c, it, o),
                                                     graph=True, rep=rep)
            res["cuda_core_us"] = time_us(lambda it=itertools.cycle(inputs): run(None, it), graph=True, rep=rep)
            res["default"] = name(dflt)
            if res["mma"].get(res["default"]) is None:
                res["mma"][res["default"]] = time_us(lambda it=itertools.cycle(inputs): run(dflt, it), graph=True,
                                                     rep=rep)
            timed = {c: v for c, v in res["mma"].items() if v is not None}
            best = min(timed, key=timed.get)
            res["best"] = best
            print(f"K{k:5d} B{b:4d} T{t:3d}  floor {floor:6.2f}  cuda-core {res['cuda_core_us']:7.2f} "
                  f"({res['cuda_core_us'] / floor:4.2f}x)  mma {res['default']} {res['mma'][res['default']]:7.2f} "
                  f"({res['mma'][res['default']] / floor:4.2f}x)  best {best} {timed[best]:7.2f} "
                  f"({timed[best] / floor:4.2f}x)"
                  + "".join(f"  {v} {res['mma'].get(name(dflt, v)) or float('nan'):7.2f}" for v in variants), flush=True)
            rows.append(res)
        del w, data, scale
        torch.cuda.empty_cache()
    with open(os.path.join(out_dir, "gathered_mma_sweep.json"), "w") as f:
        json.dump({"copy_gbps": bw, "launch_us": launch_us, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
