"""Benchmark: NVFP4 ``gathered_bias`` (SPEC §3) on a V = 131072 vocabulary.

Implementations, all on the same inputs in the same run:

* ``lowbit``: the fused single launch (gather packed rows -> decode -> scale -> dot -> add base
  -> scatter), timed by CUDA-graph replay (it is a few-µs kernel).
* ``unfused torch``: what a user writes today: ``index_select`` the packed rows and scales,
  dequantize them, ``baddbmm`` with the base values, ``scatter_`` into the logits.
* ``dequant all + index``: dequantize the whole table to bf16, then index, bmm, scatter.

The baselines are timed in eager mode, as a user runs them (their dequantize builds its E2M1
lookup table from a host list, which CUDA-graph capture does not allow).
Bytes (each touched once): gathered packed rows + their e4m3 scales + x + values + index +
the written logits. ``extra`` carries the launch floor (one tiny kernel under graph replay) and
``floor_us = max(launch, bytes / copy bandwidth)``, the bar the fused kernel is held to.
Inputs rotate through several index/x/values copies so the gathered rows are not all L2 hits.
"""
from __future__ import annotations

from lowbit.bench.registry import BenchContext, Result, register

V = 131072
FULL = [(k, b, t) for k in (256, 1024, 4096) for b in (1, 16, 64, 256) for t in (8, 32, 64)]
QUICK = [(256, 1, 8), (1024, 16, 32), (1024, 64, 64), (4096, 16, 64), (4096, 256, 64)]


@register("gathered_bias", description="NVFP4 gathered bias (Markov top-k correction), V=131072, fused vs unfused torch")
def run(ctx: BenchContext) -> list[Result]:
    import itertools

    import torch

    from lowbit.bench.timing import launch_us as measure_launch_us
    from lowbit.bench.timing import time_us
    from lowbit.formats import NVFP4
    from lowbit.ops import gathered_bias

    dev = ctx.device
    shapes = QUICK if ctx.quick else FULL
    launch_us = measure_launch_us(dev)
    results: list[Result] = []
    for k in sorted({s[0] for s in shapes}):
        w = NVFP4.quantize(torch.randn(V, k, device=dev) * 0.02)
        for _, b, t in [s for s in shapes if s[0] == k]:
            copies = 8
            inputs = [(torch.randn(b, k, device=dev, dtype=torch.bfloat16),
                       torch.randn(b, t, device=dev),
                       torch.randint(0, V, (b, t), device=dev)) for _ in range(copies)]
            logits = torch.full((b, V), float("-inf"), device=dev, dtype=torch.bfloat16)
            it = itertools.cycle(inputs)

            def fused():
                x, values, idx = next(it)
                gathered_bias(x, w, values, idx, logits)

            def unfused():
                x, values, idx = next(it)
                rows = idx.reshape(-1)
                sub = NVFP4(w.packed.index_select(0, rows), w.scale.index_select(0, rows), w.global_scale)
                wd = sub.dequantize(torch.bfloat16).view(b, t, k)
                out = torch.baddbmm(values.unsqueeze(-1).to(torch.bfloat16), wd, x.unsqueeze(-1))
                logits.scatter_(1, idx, out.squeeze(-1))

            def dequant_all():
                x, values, idx = next(it)
                full = w.dequantize(torch.bfloat16)
                out = torch.baddbmm(values.unsqueeze(-1).to(torch.bfloat16), full[idx], x.unsqueeze(-1))
                logits.scatter_(1, idx, out.squeeze(-1))

            nbytes = b * t * (k // 2 + k // 16) + b * k * 2 + b * t * (4 + 8) + b * t * 2
            floor_us = max(launch_us, nbytes / (ctx.copy_gbps * 1e3))
            case = f"K{k} B{b} T{t}"
            extra = {"launch_us": launch_us, "floor_us": floor_us, "V": V, "format": "nvfp4"}
            us = time_us(fused, graph=True)
            results.append(Result("gathered_bias", case, "lowbit", us, nbytes, 2 * b * t * k,
                                  dict(extra, timing="graph", of_floor=us / floor_us)))
            for name, fn in (("unfused torch", unfused), ("dequant all + index", dequant_all)):
                us_b = time_us(fn)
                results.append(Result("gathered_bias", case, name, us_b, nbytes, 2 * b * t * k,
                                      dict(extra, timing="eager", speedup_of_lowbit=us_b / us)))
        del w
        torch.cuda.empty_cache()
    return results
