"""Is the small-grid time of the NVFP4 gathered kernel set by where the rows lie? Times the picked
tensor-core config (CUDA-graph replay over 8 rotating inputs, as the benchmark does) with indices
drawn from the whole V = 131072 table and from its first R rows only, for a few small shapes.

    python3 scripts/probe_gathered_locality.py [--rows 2048]
"""
from __future__ import annotations

import itertools
import sys

import torch

from lowbit.bench.timing import time_us
from lowbit.formats import NVFP4
from lowbit.ops.gathered import triton_mma

V = 131072


def main():
    r = int(sys.argv[sys.argv.index("--rows") + 1]) if "--rows" in sys.argv else 2048
    one = torch.zeros(1, device="cuda")
    print(f"one launch {time_us(lambda: one.add_(1.0), graph=True):.2f} us")
    for k in (256, 1024, 4096):
        w = NVFP4.quantize(torch.randn(V, k, device="cuda") * 0.02)
        data, scale, gsc = w.packed, w.scale.view(torch.uint8), w.global_scale
        for b, t in ((1, 8), (16, 64), (64, 32)):
            logits = torch.zeros(b, V, device="cuda", dtype=torch.bfloat16)
            cfg = triton_mma.pick_config(b, t, k)
            line = [f"K{k} B{b} T{t} {cfg}:"]
            for hi in (V, r):
                inputs = [(torch.randn(b, k, device="cuda", dtype=torch.bfloat16), torch.randn(b, t, device="cuda"),
                           torch.randint(0, hi, (b, t), device="cuda")) for _ in range(8)]
                it = itertools.cycle(inputs)

                def run():
                    x, values, idx = next(it)
                    triton_mma.launch(x, data, scale, gsc, idx, k, logits, values, 1.0, True, cfg)

                line.append(f"rows in [0, {hi}) {time_us(run, graph=True, rep=30):.2f} us")
            print("  ".join(line), flush=True)
        del w, data, scale
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
