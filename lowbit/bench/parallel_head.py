"""Benchmark: the exact global top-k of a vocab-parallel LM head, k pairs vs full logits.

Each rank holds ``vocab / world`` rows (ceil split) of a ``[vocab, K]`` bf16 head with random
N(0, 0.02) weights and gets the same activations ``x [M, K]``. Per call, measured on every rank:

* ``lowbit``: ``ParallelDraftHead.topk(x, k)`` -- the rank's certified DraftHead top-k, one
  all-gather of ``[M, k]`` int64 keys (``world * M * k * 8`` bytes received), a final top-k.
* ``baseline``: what engines do -- ``F.linear`` (cuBLAS bf16) on the shard, all-gather the bf16
  logits (``M * vocab * 2`` bytes received), ``torch.topk`` over the fp32 cast of the full row.
* the two exchanges alone (``comm lowbit`` / ``comm baseline``) and the local DraftHead alone.

A collective forces every rank to call it the same number of times, so the timing is a fixed
count of iterations (CUDA events per call on the GPU), not ``do_bench``'s adaptive one; the
reported time is the slowest rank's median. Rank 0 prints a table and writes JSON to ``--out``.

Run (one process a GPU)::

    torchrun --standalone --nproc-per-node 2 -m lowbit.bench.parallel_head --out parallel_head_tp2.json

Single process (world size 1 on one GPU; also ``lowbit bench --op parallel_head``), and a CPU dry
run with gloo::

    python -m lowbit.bench.parallel_head --out tp1.json
    torchrun --standalone --nproc-per-node 2 -m lowbit.bench.parallel_head --backend gloo --device cpu \\
        --vocab 4096 --k-dim 256 --iters 5 --warmup 2 --out cpu.json

NVLink multicast stays off (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
NVSHMEM_DISABLE_NVLS=1, set before the process group starts); no symmetric-memory ops are used.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

from lowbit.bench.registry import BenchContext, Result, register

_NO_MULTICAST = (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1"))


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m lowbit.bench.parallel_head", description=__doc__.split("\n")[0])
    p.add_argument("--vocab", type=int, default=248320, help="full vocabulary rows (default 248320)")
    p.add_argument("--k-dim", type=int, default=5120, help="hidden size K (default 5120)")
    p.add_argument("--ms", default="1,16,64", help="comma-separated batch rows M")
    p.add_argument("--topk", default="1,16", help="comma-separated k (1 = argmax)")
    p.add_argument("--backend", default=None, choices=("nccl", "gloo"), help="default: nccl on cuda, gloo on cpu")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--mode", default="certified", choices=("certified", "fast"))
    p.add_argument("--bits", default="auto", help="DraftHead coarse bits: auto, 2, 4, 8")
    p.add_argument("--group-size", type=int, default=64)
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="JSON output path (rank 0)")
    args = p.parse_args(argv)
    args.ms = [int(v) for v in args.ms.split(",")]
    args.topk = [int(v) for v in args.topk.split(",")]
    args.bits = args.bits if args.bits == "auto" else int(args.bits)
    args.backend = args.backend or ("nccl" if args.device == "cuda" else "gloo")
    return args


def init(args):
    """Process group from torchrun's environment, or a world of one when run directly."""
    import torch
    import torch.distributed as dist

    for var, val in _NO_MULTICAST:
        os.environ.setdefault(var, val)
    if "RANK" in os.environ:
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        local = int(os.environ.get("LOCAL_RANK", rank))
        if args.device == "cuda":
            torch.cuda.set_device(local)
        dist.init_process_group(args.backend, rank=rank, world_size=world)
    else:
        local = 0
        if args.device == "cuda":
            torch.cuda.set_device(0)
        store = dist.TCPStore("127.0.0.1", 0, 1, is_master=True)
        dist.init_process_group(args.backend, store=store, rank=0, world_size=1)
    device = torch.device("cuda", local) if args.device == "cuda" else torch.device("cpu")
    return dist.get_rank(), dist.get_world_size(), device


def _all_gather(out, inp) -> None:
    """All-gather a contiguous 1-D ``inp [n]`` into ``out [world * n]`` (1-D: gloo chunks the output
    along dim 0); ``all_gather_single`` where this torch has it."""
    import torch.distributed as dist

    (getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor)(out, inp)


def timed(fn, iters: int, warmup: int, device) -> float:
    """Median µs of ``fn()`` over ``iters`` calls (every rank makes the same calls)."""
    import torch
    import torch.distributed as dist

    for _ in range(warmup):
        fn()
    dist.barrier()
    samples = []
    if device.type == "cuda":
        torch.cuda.synchronize()
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
        for start, end in events:
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        samples = [s.elapsed_time(e) * 1e3 for s, e in events]
    else:
        for _ in range(iters):
            t0 = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(samples)


def slowest(us: float, device) -> float:
    import torch
    import torch.distributed as dist

    t = torch.tensor([us], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def measure(args, rank: int, world: int, device, log=print) -> tuple[list[dict], dict | None]:
    """Every (M, k, impl) of ``args`` timed on this rank's shard: ([{"m", "k", "impl", "us",
    "bytes_received", "top1_agreement_vs_bf16_baseline"}], the local head's stats)."""
    import torch
    import torch.nn.functional as F

    from lowbit.distributed import ParallelDraftHead, vocab_boundaries

    bounds = vocab_boundaries(args.vocab, world)
    start, rows = bounds[rank], bounds[rank + 1] - bounds[rank]
    gen = torch.Generator(device=device).manual_seed(args.seed + 1000 * (rank + 1))  # each rank its own rows
    shard = (torch.randn(rows, args.k_dim, generator=gen, device=device) * 0.02).to(torch.bfloat16)
    head = ParallelDraftHead(shard, start, args.vocab, mode=args.mode, bits=args.bits, group_size=args.group_size)

    def baseline(x, k):
        local = F.linear(x, shard)  # [M, rows] bf16
        full = torch.empty(world * x.shape[0] * bounds[1], dtype=local.dtype, device=device)
        # ceil split: pad the short last shard to the common width so one all-gather suffices
        padded = F.pad(local, (0, bounds[1] - rows), value=float("-inf")) if rows < bounds[1] else local
        _all_gather(full, padded.contiguous().view(-1))
        logits = full.view(world, x.shape[0], bounds[1]).permute(1, 0, 2).reshape(x.shape[0], -1)
        return torch.topk(logits.float(), k, dim=-1)

    results = []
    for m in args.ms:
        gx = torch.Generator(device=device).manual_seed(args.seed)  # identical x on every rank
        x = torch.randn(m, args.k_dim, generator=gx, device=device).to(torch.bfloat16)
        for k in args.topk:
            ours_i = head.topk(x, k)[1]
            base_i = baseline(x, k)[1]
            agree = float((ours_i[:, 0] == base_i[:, 0]).float().mean())  # bf16 logits may reorder near-ties
            keys = torch.zeros(m * k, dtype=torch.int64, device=device)
            keys_out = torch.empty(world * m * k, dtype=torch.int64, device=device)
            logits_in = torch.zeros(m * bounds[1], dtype=torch.bfloat16, device=device)
            logits_out = torch.empty(world * m * bounds[1], dtype=torch.bfloat16, device=device)
            cases = {
                "lowbit ParallelDraftHead.topk": (lambda: head.topk(x, k), world * m * k * 8),
                "baseline linear+gather+topk": (lambda: baseline(x, k), world * m * bounds[1] * 2),
                "comm lowbit keys": (lambda: _all_gather(keys_out, keys), world * m * k * 8),
                "comm baseline logits": (lambda: _all_gather(logits_out, logits_in), world * m * bounds[1] * 2),
                "local DraftHead.topk": (lambda: head.local_head.topk(x, min(k, rows)) if rows else None, 0),
            }
            row = {}
            for name, (fn, nbytes) in cases.items():
                us = slowest(timed(fn, args.iters, args.warmup, device), device)
                results.append({"m": m, "k": k, "impl": name, "us": us, "bytes_received": nbytes,
                                "top1_agreement_vs_bf16_baseline": agree})
                row[name] = us
            if rank == 0:
                lo, base = row["lowbit ParallelDraftHead.topk"], row["baseline linear+gather+topk"]
                log(f"M={m:<3} k={k:<3} lowbit {lo:9.1f} us | baseline {base:9.1f} us | x{base / lo:.2f} | comm "
                    f"{row['comm lowbit keys']:7.1f} vs {row['comm baseline logits']:7.1f} us | local head "
                    f"{row['local DraftHead.topk']:8.1f} us | top1 agree {agree:.2f}")
    return results, getattr(head.local_head, "stats", None)


def main(argv=None) -> int:
    import torch
    import torch.distributed as dist

    args = parse_args(argv)
    rank, world, device = init(args)
    results, stats = measure(args, rank, world, device, log=lambda s: print(s, flush=True))
    if rank == 0 and args.out:
        from lowbit.distributed import vocab_boundaries

        bounds = vocab_boundaries(args.vocab, world)
        config = {"vocab": args.vocab, "k_dim": args.k_dim, "world": world, "rows_per_rank": bounds[1],
                  "backend": args.backend, "device": str(device), "mode": args.mode, "bits": args.bits,
                  "group_size": args.group_size, "iters": args.iters, "warmup": args.warmup,
                  "torch": torch.__version__,
                  "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
                  "timing": "median of per-call times, slowest rank",
                  "env": {v: os.environ.get(v) for v, _ in _NO_MULTICAST}}
        with open(args.out, "w") as f:
            json.dump({"config": config, "results": results, "local_head_stats_rank0": stats}, f, indent=2)
        print(f"wrote {args.out}")
    dist.barrier()
    dist.destroy_process_group()
    return 0


def to_results(rows: list[dict], shape: str, world: int) -> list[Result]:
    """:func:`measure`'s rows as benchmark results: a lowbit and a baseline row per (M, k); the
    exchanges and the local head alone (parts of those calls, not baselines) go into the lowbit
    row's ``extra``. Bytes received over the network are not memory traffic: kept in ``extra``, so
    no memory floor is derived from them."""
    out = []
    for m, k in dict.fromkeys((r["m"], r["k"]) for r in rows):
        by = {r["impl"]: r for r in rows if (r["m"], r["k"]) == (m, k)}
        lo, base = by.pop("lowbit ParallelDraftHead.topk"), by.pop("baseline linear+gather+topk")
        case = f"{shape} M{m} k{k} world {world}"
        extra = {"timing": "CUDA events per call, median", "bytes_received": lo["bytes_received"],
                 "top1_agreement_vs_bf16_baseline": lo["top1_agreement_vs_bf16_baseline"],
                 **{f"{name} us": r["us"] for name, r in by.items()}}
        out.append(Result("parallel_head", case, "lowbit ParallelDraftHead.topk", lo["us"], extra=extra))
        out.append(Result("parallel_head", case, "linear + all-gather + topk", base["us"],
                          extra={"timing": extra["timing"], "bytes_received": base["bytes_received"]}))
    return out


@register("parallel_head", description="vocab-parallel DraftHead exact top-k vs linear + all-gather + topk, "
                                       "world size 1 (torchrun -m lowbit.bench.parallel_head for more GPUs)")
def run(ctx: BenchContext) -> list[Result]:
    import torch.distributed as dist

    if dist.is_initialized():
        raise RuntimeError("parallel_head starts its own world-of-one process group; one is already running")
    args = parse_args(["--iters", "20"] + (["--ms", "1,16"] if ctx.quick else []))
    rank, world, device = init(args)
    try:
        rows, _ = measure(args, rank, world, device, log=lambda s: None)
    finally:
        dist.destroy_process_group()
    return to_results(rows, f"V{args.vocab} K{args.k_dim}", world)


if __name__ == "__main__":
    sys.exit(main())
