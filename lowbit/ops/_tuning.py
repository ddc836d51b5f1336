"""What the tuners (``lowbit/ops/<op>/tune.py``, run as ``lowbit tune <op>``) share: the CUDA check, a
log with elapsed seconds, the JSON dump and the relative error of a candidate's output.

A tuner sweeps the candidates of the launch table beside its kernels, checks each against a
reference first, times the valid ones and prints the best in the table's own syntax; it changes
no file (the tables are edited by hand from its output)."""
from __future__ import annotations

import json
import os
import time

__all__ = ["Log", "cuda_missing", "dump_json", "rel_err"]


def cuda_missing(tool: str) -> bool:
    """True (after saying so) when no CUDA GPU is visible: the tuners time kernels on one."""
    import torch

    if torch.cuda.is_available():
        return False
    print(f"{tool}: needs a CUDA GPU (torch.cuda.is_available() is False); nothing to tune here")
    return True


class Log:
    """``log(*parts)`` prints one line prefixed with the seconds since the tuner started."""

    def __init__(self):
        self.t0 = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def __call__(self, *parts) -> None:
        print(f"[{self.elapsed():6.1f}s]", *parts, flush=True)


def dump_json(path: str, obj) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(obj, f, indent=1, default=str)


def rel_err(out, ref) -> float:
    """``||out - ref|| / ||ref||`` in fp64 (inf when NaN)."""
    out64, ref64 = out.double().flatten().cpu(), ref.double().flatten().cpu()
    denom = ref64.norm().item()
    err = (out64 - ref64).norm().item() / (denom if denom > 0 else 1.0)
    return err if err == err else float("inf")
