"""Compile the Triton / Gluon kernels of the public ops for sm_90 without a GPU, as their dispatch
launches them on the benchmark's shapes (``lowbit.bench``): the block-scaled GEMMs (``fp8_gemm``,
``fp4_gemm``: every M band of their dispatch tables), the gathered projection, sparse attention,
the Sinkhorn split and the activation quantizers. The ops run on CPU stand-ins (empty tensors of
the real shapes and dtypes) with every kernel of their modules replaced by a recorder
(``compiler.record_launches``) and the device's answers patched in (sm_90, 132 SMs, split-K
counters available), and each distinct recorded launch is compiled once; a wgmma kernel must
show QGMMA in its SASS, the decode GEMV on ``mma.sync`` HMMA. CI runs these kernels only in the
interpreter, which accepts what the sm_90 compiler may reject and never sees the configurations
the launchers pick for a GPU (tile tables by size, split counts by SM count, the tensor-core
paths, programmatic dependent launches). The draft head has its own checks (``coarse_wgmma.py
--dispatch``, ``fast_tail.py``, ``certified_head.py --dispatch``).

Run from the repository root: ``python -m tests.sm90.ops_dispatch [--ops fp8_gemm,fp4_gemm,gathered,
sparse_attn,hc_sinkhorn,act_quant] [--list]`` (exit 1 on a failure).
"""
from __future__ import annotations

import argparse
import os
import sys

os.environ.pop("TRITON_INTERPRET", None)  # before triton is imported

from tests.sm90.compiler import DECODE_SHAPES, compile_recorded, distinct_launches, record_launches  # noqa: E402

#: an H200's streaming multiprocessors (the launchers size split counts and grids by them)
SMS = 132


def _op_modules(*packages: str) -> list:
    """The packages' modules that hold their kernels and dispatch (``lowbit.ops.<package>.*``), and
    the shared launch helpers."""
    import importlib
    import pkgutil

    mods = []
    for package in packages:
        pkg = importlib.import_module(f"lowbit.ops.{package}")
        mods += [pkg] + [importlib.import_module(f"{pkg.__name__}.{info.name}") for info in pkgutil.iter_modules(pkg.__path__)]
    return mods + [importlib.import_module("lowbit.ops._triton_pdl"), importlib.import_module("lowbit.ops._arrival_counters")]


def _record(packages, call) -> list:
    """``call()``'s launches with the packages' kernels recorded and the GPU's answers patched in:
    Triton for CPU tensors, ``SMS`` SMs, compute capability 9.0 (sm_90: PDL, the tensor-core paths),
    split-K arrival counters as plain CPU zeros (CPU-only torch has no capture query)."""
    import torch
    from triton.runtime.jit import JITFunction

    mods = _op_modules(*([packages] if isinstance(packages, str) else packages))
    kernels = [(mod, name) for mod in mods for name, v in vars(mod).items() if isinstance(v, JITFunction)]
    answers = {
        "use_triton": lambda *tensors: True,
        "sm_count": lambda device, interpret: SMS,
        "capability_at_least": lambda device, cap: cap <= (9, 0),
        "device_arch": lambda device: (9, 0),
        "counters_ready": lambda device: True,
        "arrival_counters": lambda device, n_tiles, who: torch.zeros(n_tiles, dtype=torch.int32),
    }
    patches = [(mod, name, fn) for mod in mods for name, fn in answers.items() if hasattr(mod, name)]
    return record_launches(call, kernels, patches)


#: M of every band of the GEMMs' dispatch tables (decode GEMVs, the decode-band and prefill wgmma
#: kernels, the tiled kernel between them)
GEMM_MS = (1, 8, 9, 16, 17, 32, 33, 64, 128, 512, 4096)


def _gemm_operands(m: int, n: int, k: int, e8m0: bool, fp4: bool):
    import torch

    sdt = torch.float8_e8m0fnu if e8m0 else torch.float32
    a, a_s = torch.empty((m, k), dtype=torch.float8_e4m3fn), torch.empty((m, k // 128), dtype=sdt)
    if fp4:
        return a, a_s, torch.empty((n, k // 2), dtype=torch.uint8), torch.empty((n, k // 32), dtype=torch.uint8)
    return a, a_s, torch.empty((n, k), dtype=torch.float8_e4m3fn), torch.empty((-(-n // 128), k // 128), dtype=sdt)


def fp8_gemm_launches() -> list:
    """``fp8_gemm``'s routed kernels on the benchmark's five (N, K) at every M band, fp32 and UE8M0
    activation scales."""
    from lowbit.ops.fp8_gemm import dispatch

    def run():
        for n, k in DECODE_SHAPES:
            for m in GEMM_MS:
                for e8m0 in (False, True):
                    dispatch.fp8_gemm(*_gemm_operands(m, n, k, e8m0, fp4=False))

    return _record(("fp8_gemm", "fp4_gemm"), run)


def fp4_gemm_launches() -> list:
    """``fp4_gemm``'s routed kernels (its own, and the FP8 ones it re-encodes for) on the benchmark's
    five (N, K) at every M band, fp32 and UE8M0 activation scales."""
    from lowbit.ops.fp4_gemm import dispatch

    def run():
        for n, k in DECODE_SHAPES:
            for m in GEMM_MS:
                for e8m0 in (False, True):
                    dispatch.fp4_gemm(*_gemm_operands(m, n, k, e8m0, fp4=True))

    return _record(("fp8_gemm", "fp4_gemm"), run)


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


OPS = {"fp8_gemm": fp8_gemm_launches, "fp4_gemm": fp4_gemm_launches, "gathered": gathered_launches, "sparse_attn": sparse_attn_launches, "hc_sinkhorn": hc_sinkhorn_launches,
       "act_quant": act_quant_launches}


#: (kernel name part, the SASS opcode its compiled code must hold), first match wins: the GEMMs'
#: FP8 tensor-core kernels (wgmma, Gluon, tiled ``tl.dot``) QGMMA; the decode GEMV and the gathered
#: NVFP4 kernel on ``mma.sync`` HMMA
NEEDS = (("wgmma", "QGMMA"), ("gluon", "QGMMA"), ("mma_gemv", "HMMA"), ("gathered_mma", "HMMA"),
         ("gemm_kernel", "QGMMA"), ("gemm_tma_kernel", "QGMMA"))


def _by_marker(launches: list) -> dict:
    """The launches grouped by the opcode their kernel must show (None: no check), in order."""
    out: dict = {}
    for launch in launches:
        name = launch[0].fn.__name__
        out.setdefault(next((op for part, op in NEEDS if part in name), None), []).append(launch)
    return out


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
        for marker, group in _by_marker(distinct).items():
            failed += compile_recorded(group, label, marker)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
