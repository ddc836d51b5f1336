"""The tuner behind the fp32 coarse kernel's launch table (:data:`.coarse_fp32.CONFIGS` /
``CONFIGS_BITS``): times the coarse pass alone for each candidate configuration per M band on a
benchmark head and prints the best per band. Needs a CUDA GPU.

    lowbit tune coarse_head [--n 124160] [--k 5120] [--bits 2,4,8] [--bands 1,16,32,64] [--bound det]
"""
from __future__ import annotations

import argparse

#: candidate configurations per M band: (BM, num_warps, num_stages, BK, step); BK 0 = the default
#: for the group; step: the GEMV's K step (see :class:`.coarse_fp32.Fp32Config`)
TUNE_SPACE = {
    1: [(1, 8, 3, 0, "bytes"), (1, 8, 3, 0, "words_offset"), (1, 4, 3, 0, "words_offset"), (1, 16, 3, 0, "words_offset"),
        (1, 8, 3, 0, "words2")],
    16: [(16, 4, 3, 0, "bytes"), (16, 8, 3, 0, "bytes"), (16, 4, 4, 0, "bytes")],
    32: [(32, 4, 3, 0, "bytes"), (32, 8, 3, 0, "bytes")],
    64: [(64, 8, 4, 0, "bytes"), (64, 8, 3, 0, "bytes"), (32, 4, 3, 0, "bytes")],
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="lowbit tune coarse_head", description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=124160)
    ap.add_argument("--k", type=int, default=5120)
    ap.add_argument("--bits", default="2,4,8", help="INTx widths summed per configuration")
    ap.add_argument("--bands", default="1,16,32,64")
    ap.add_argument("--bound", choices=("none", "det", "stat"), default="det",
                    help="the coarse pass's bound (the fp32 kernel serves certified mode)")
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("lowbit tune coarse_head: needs a CUDA GPU")
        return 2
    from lowbit.bench.timing import copy_bandwidth_gbps, time_us
    from lowbit.ops.coarse_head import BOUND_DET, BOUND_NONE, BOUND_STAT, pack
    from lowbit.ops.coarse_head.coarse_fp32 import Fp32Config, coarse_fp32
    from lowbit.ops.coarse_head.packing import raw_tensors

    bound = {"none": BOUND_NONE, "det": BOUND_DET, "stat": BOUND_STAT}[args.bound]
    gbps = copy_bandwidth_gbps(2**30)
    w = (torch.randn(args.n, args.k, device="cuda") * 0.02).to(torch.bfloat16)
    packs = {int(b): pack(w, int(b), 64) for b in args.bits.split(",")}
    for band in (int(b) for b in args.bands.split(",")):
        x = torch.randn(band, args.k, device="cuda", dtype=torch.bfloat16)
        totals = {}
        for cfg in TUNE_SPACE[band]:
            total = 0.0
            for bits, p in packs.items():
                def call(p=p, bits=bits, cfg=cfg):
                    return coarse_fp32(x, p.kind, *raw_tensors(p), n=args.n, bits=bits, group_size=64,
                                       padded_k=p.padded_k, block=128, kcand=4, bound=bound, sigma=4.0,
                                       write_logits=False, config=Fp32Config(*cfg))
                try:
                    call()
                    t = time_us(call)
                except Exception as e:  # noqa: BLE001 - an invalid config (e.g. out of shared memory) is skipped
                    print(f"M{band} int{bits} {cfg}: {type(e).__name__}: {str(e)[:200]}", flush=True)
                    total = float("inf")
                    break
                floor = p.nbytes / (gbps * 1e3)
                print(f"M{band} int{bits} {cfg}: {t:.1f} us = {100 * t / floor:.0f}% of floor {floor:.1f} us",
                      flush=True)
                total += t
            totals[cfg] = total
        best = min(totals, key=totals.get)
        print(f"best for M band {band}: {best}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
