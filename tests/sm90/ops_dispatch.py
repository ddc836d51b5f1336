"""Compile the Triton kernels of the gathered projection, sparse attention, the Sinkhorn split and
the activation quantizers for sm_90 without a GPU, as their public ops dispatch them on the
benchmark's shapes (``lowbit.bench``): the ops run on CPU stand-ins (empty tensors of the real
shapes and dtypes) with every kernel of their modules replaced by a recorder
(``compiler.record_launches``), and each distinct recorded launch is compiled once. CI runs
these kernels only in the interpreter, which accepts what the sm_90 compiler may reject and never
sees the configurations the launchers pick for a GPU (tile tables by size, split counts by SM
count, the tensor-core gathered kernel, programmatic dependent launches).

The GEMMs (``fp8_gemm`` / ``fp4_gemm``) are not here: their dispatch reads the device itself
(TMA, capability, Gluon) -- ``fp8_gemm_gluon.py`` / ``fp*_wgmma_gemv.py --dispatch`` and
``tune_gemm.py --compile-only`` cover them; nor the draft head (``coarse_wgmma.py
--dispatch``, ``fast_tail.py``, ``certified_head.py --dispatch``).

Run from the repository root: ``python -m tests.sm90.ops_dispatch [--ops gathered,sparse_attn,
hc_sinkhorn,act_quant] [--list]`` (exit 1 on a failure).
"""
from __future__ import annotations

import argparse
import os
import sys

os.environ.pop("TRITON_INTERPRET", None)  # before triton is imported


from tests.sm90.compiler import compile_recorded, distinct_launches, record_launches  # noqa: E402

#: an H200's streaming multiprocessors (the launchers size split counts and grids by them)
SMS = 132


def _op_modules(package: str) -> list:
    """The package's modules that hold its kernels and dispatch (``lowbit.ops.<package>.*``)."""
    import importlib
    import pkgutil

    pkg = importlib.import_module(f"lowbit.ops.{package}")
    mods = [pkg] + [importlib.import_module(f"{pkg.__name__}.{info.name}")
                    for info in pkgutil.iter_modules(pkg.__path__)]
    return mods + [importlib.import_module("lowbit.ops._triton_pdl")]


def _record(package: str, call) -> list:
    """``call()``'s launches with the package's kernels recorded and the GPU's answers patched in:
    Triton for CPU tensors, ``SMS`` SMs, compute capability 9.0 (sm_90: PDL, the tensor-core paths)."""
    from triton.runtime.jit import JITFunction

    mods = _op_modules(package)
    kernels = [(mod, name) for mod in mods for name, v in vars(mod).items() if isinstance(v, JITFunction)]
    patches = []
    for mod in mods:
        if hasattr(mod, "use_triton"):
            patches.append((mod, "use_triton", lambda *tensors: True))
        if hasattr(mod, "sm_count"):
            patches.append((mod, "sm_count", lambda device, interpret: SMS))
        if hasattr(mod, "capability_at_least"):
            patches.append((mod, "capability_at_least", lambda device, cap: cap <= (9, 0)))
    return record_launches(call, kernels, patches)


def gathered_launches() -> list:
    """``gathered_dot`` / ``gathered_bias`` / ``gathered_rows`` over a V = 131072 vocabulary: NVFP4 at
    the benchmark's K x B x T grid (bf16 x: the tensor-core kernel), and NVFP4 with fp32 x, MXFP4,
    FP8 rows, INT4 / INT2 g64 and a dense bf16 table at a few of its shapes."""
    import torch

    from lowbit.bench.gathered import FULL, V
    from lowbit.formats import FP8, INTx, MXFP4, NVFP4
    from lowbit.ops.gathered import gathered_bias, gathered_dot, gathered_rows

    def nvfp4(k):
        return NVFP4(torch.empty(V, k // 2, dtype=torch.uint8), torch.empty(V, k // 16, dtype=torch.float8_e4m3fn),
                     torch.empty(()))

    def others(k):
        ell = INTx.quantize(torch.zeros(1, k), bits=4, group_size=64).packed.shape[1]
        ell2 = INTx.quantize(torch.zeros(1, k), bits=2, group_size=64).packed.shape[1]
        return [MXFP4(torch.empty(V, k // 2, dtype=torch.uint8), torch.empty(V, k // 32, dtype=torch.uint8)),
                FP8(torch.empty(V, k, dtype=torch.float8_e4m3fn), torch.empty(V, 1), "row"),
                INTx(torch.empty(V, ell, dtype=torch.uint8), torch.empty(V, ell * 2 // 64, dtype=torch.float16),
                     torch.empty(V, ell * 2 // 64, dtype=torch.uint8), 4, 64, k),
                INTx(torch.empty(V, ell2, dtype=torch.uint8), torch.empty(V, ell2 * 4 // 64, dtype=torch.float16),
                     torch.empty(V, ell2 * 4 // 64, dtype=torch.uint8), 2, 64, k),
                torch.empty(V, k, dtype=torch.bfloat16)]

    def run():
        for k, b, t in FULL:
            w = nvfp4(k)
            x, idx = torch.empty(b, k, dtype=torch.bfloat16), torch.zeros(b, t, dtype=torch.int64)
            gathered_bias(x, w, torch.empty(b, t), idx, torch.empty(b, V, dtype=torch.bfloat16))
            gathered_dot(x, w, idx)
        for k, b, t in ((1024, 16, 32), (4096, 64, 64)):
            idx = torch.zeros(b, t, dtype=torch.int64)
            gathered_dot(torch.empty(b, k), nvfp4(k), idx)
            for w in others(k):
                gathered_dot(torch.empty(b, k, dtype=torch.bfloat16), w, idx)
                gathered_rows(w, idx)
            gathered_rows(nvfp4(k), idx)

    return _record("gathered", run)


def sparse_attn_launches() -> list:
    """``sparse_attn`` at the benchmark's cases (decode m = 1 / 2 and prefill, h 64 / 128, top-512 /
    2048, bf16 and FP8 KV with per-64 scales; d = 512)."""
    import torch

    from lowbit.bench.sparse_attn import D, _attn_cases
    from lowbit.ops.sparse_attn import sparse_attn

    n = 4096  # the cache length is a runtime size only (a multiple of 16 like the benchmark's 65536)

    def run():
        for m, b, h, topk, fp8 in _attn_cases(False):
            q = torch.empty(b, m, h, D, dtype=torch.bfloat16)
            kv = torch.empty(b, n, D, dtype=torch.float8_e4m3fn if fp8 else torch.bfloat16)
            scale = torch.empty(b, n, D // 64) if fp8 else None
            sparse_attn(q, kv, torch.empty(h), torch.zeros(b, m, topk, dtype=torch.int32), D ** -0.5, scale)

    return _record("sparse_attn", run)


def hc_sinkhorn_launches() -> list:
    """``hc_split_sinkhorn`` at the benchmark's shape (hc 4, 16384 rows) and a decode-sized batch."""
    import torch

    from lowbit.ops.hc_sinkhorn import hc_split_sinkhorn

    def run():
        for rows in (16384, 4):
            hc = 4
            hc_split_sinkhorn(torch.empty(1, rows, (2 + hc) * hc), torch.empty(3), torch.empty((2 + hc) * hc))

    return _record("hc_sinkhorn", run)


def act_quant_launches() -> list:
    """``act_quant`` (fp32 / UE8M0 scales, in place), ``fp4_act_quant`` and ``weight_dequant`` at the
    benchmark's [8192, 7168] / [16, 7168] activations and a 7168 x 2048 FP8 block-scaled weight."""
    import torch

    from lowbit.ops.act_quant import act_quant, fp4_act_quant, weight_dequant

    def run():
        for m in (8192, 16):
            x = torch.empty(m, 7168, dtype=torch.bfloat16)
            act_quant(x)
            act_quant(x, scale_fmt="ue8m0")
            act_quant(x, inplace=True)
            fp4_act_quant(x)
        weight_dequant(torch.empty(7168, 2048, dtype=torch.float8_e4m3fn), torch.empty(56, 16))

    return _record("act_quant", run)


OPS = {"gathered": gathered_launches, "sparse_attn": sparse_attn_launches, "hc_sinkhorn": hc_sinkhorn_launches,
       "act_quant": act_quant_launches}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ops", default=",".join(OPS), help="comma-separated, of " + ", ".join(OPS))
    ap.add_argument("--list", action="store_true", help="print the distinct launches, compile nothing")
    args = ap.parse_args()
    unknown = set(args.ops.split(",")) - set(OPS)
    if unknown:
        ap.error(f"unknown ops {sorted(unknown)}; choose from {', '.join(OPS)}")
    failed = 0
    for op in args.ops.split(","):
        launches = OPS[op]()
        distinct = distinct_launches(launches)
        print(f"{op}: {len(launches)} launches recorded, {len(distinct)} distinct", flush=True)

        def label(fn, kw, op=op):
            return f"{op} {fn.fn.__name__} " + " ".join(f"{a}={v}" for a, v in kw.items()
                                                        if a.isupper() and a != "INTERPRET")
        if args.list:
            for fn, _, kw in distinct:
                print("   ", label(fn, kw))
            continue
        failed += compile_recorded(distinct, label)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
