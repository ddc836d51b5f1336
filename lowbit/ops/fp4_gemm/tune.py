"""Tune ``fp4_gemm``'s tiled launch table (``tiled.CONFIGS``) on a GPU: ``lowbit tune fp4_gemm``.

The sweep is ``fp8_gemm``'s tuner (``lowbit/ops/fp8_gemm/tune.py``: the two tiled kernels share
their launcher and config type) restricted to the FP4 bands; the options are the same.
"""
from __future__ import annotations

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    from lowbit.ops.fp8_gemm import tune

    return tune.main(["--only", "fp4", *(argv or [])], prog="lowbit tune fp4_gemm")


if __name__ == "__main__":
    raise SystemExit(main())
