"""The FP4 -> FP8 re-encoding kernel (``lowbit/ops/fp4_gemm/expand.py``) compiled for sm_90 without
a GPU: registers, shared memory, SASS instructions a thread and its memory instructions, for the
per-code path, the word-parallel (SWAR) path alone, and the shipped kernel (both branches).

    python -m tests.sm90.fp4_expand [--warps 4,8]

The kernel is bound by its instruction count (H200: 1752 a thread for a 128 x 128 tile at 8 warps,
~158 us on N7168 K16384 -- about what 132 SMs issue in that time), so fewer instructions a tile is
the figure to watch.
"""
from __future__ import annotations

import argparse
import collections
import importlib.util
import os
import re
import sys
import tempfile

os.environ.pop("TRITON_INTERPRET", None)  # before triton is imported

from tests.sm90.compiler import compile_sm90, resource_usage, sass_opcodes  # noqa: E402

SIG = {"b_ptr": "*u8", "b32_ptr": "*i32", "bs_ptr": "*u8", "q_ptr": "*u8", "q32_ptr": "*i32", "qs_ptr": "*fp32",
       "bad_ptr": "*i32", "N": "i32", "K": "i32", "FAR": "constexpr", "SWAR_MAX": "constexpr", "USE_SWAR": "constexpr"}


def _swar_only_module():
    """A copy of expand.py whose kernel takes the word-parallel branch unconditionally (so the other
    branch is not compiled), to count that branch alone."""
    from lowbit.ops.fp4_gemm import expand

    src = open(expand.__file__).read()
    src = src.replace("    if USE_SWAR and spread <= SWAR_MAX:", "    if USE_SWAR:")
    assert "    if USE_SWAR:\n        # the tile as" in src, "expand.py changed: update this script"
    d = tempfile.mkdtemp()
    path = os.path.join(d, "expand_swar_only.py")
    with open(path, "w") as f:
        f.write(src)
    spec = importlib.util.spec_from_file_location("expand_swar_only", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--warps", default="4,8")
    args = ap.parse_args()
    from lowbit.ops.fp4_gemm import expand

    variants = [("per-code", expand, False), ("swar only", _swar_only_module(), True), ("shipped, both", expand, True)]
    for name, mod, swar in variants:
        for w in [int(v) for v in args.warps.split(",")]:
            kern = compile_sm90(mod._expand_kernel, SIG, {"FAR": 14, "SWAR_MAX": 11, "USE_SWAR": swar},
                                divisible=(0, 1, 2, 3, 4, 5, 6, 8), num_warps=w)
            ops = sass_opcodes(kern)
            mem = collections.Counter(o for o in ops if re.match(r"(LDG|STG|LDS|STS|BAR)", o))
            print(f"{name:14s} warps {w}: {resource_usage(kern)}, {len(ops)} instructions a thread, "
                  f"{dict(sorted(mem.items()))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
