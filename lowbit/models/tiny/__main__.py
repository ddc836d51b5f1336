"""``python -m lowbit.models.tiny [--device cuda] [--steps 22] [--seed 0]``: run the self-test."""
from __future__ import annotations

import argparse
import sys

import torch


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lowbit.models.tiny", description=__doc__)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--steps", type=int, default=22, help="decode steps after the prompt")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    from lowbit.models.tiny.verify import selftest

    return 0 if selftest(device=args.device, steps=args.steps, seed=args.seed)["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
