"""Run fp8_gemm / fp4_gemm on the GPU and grep the PTX / SASS of every kernel they compiled for the
FP8 MMA path.

On sm_90 the tensor-core kernels should show ``wgmma.mma_async ... .e4m3.e4m3`` in the PTX and
``QGMMA`` (or ``HGMMA`` with an ``.E4M3`` operand type) in the SASS. The decode GEMV on
``mma.sync`` is the exception by design: sm_90 has no E4M3 ``mma.sync`` unit, so it converts
E4M3 -> fp16 exactly (``cvt.rn.f16x2.e4m3x2``, SASS ``F2FP.F16.E4M3``) and runs fp16
``HMMA.16816``; both must be there. A kernel with no MMA at all (scale decoding, re-encoding,
split-K reduction) is listed and not judged. Prints each kernel's registers, spills and MMA
instructions and exits non-zero when an MMA kernel lacks its FP8 path, or when no kernel at
prefill size used wgmma on sm_90. The disassembler is ``cuobjdump`` / ``nvdisasm`` from PATH or
from Triton's package.

    python scripts/check_sass.py
"""
from __future__ import annotations

import importlib
import os
import pkgutil
import re
import shutil
import subprocess
import sys
import tempfile

import torch

#: (N, K) of a decode-benchmark weight, and the M sizes run (every dispatch band)
N, K = 7168, 2048
MS = (1, 16, 32, 64, 4096)


def _tools():
    import triton

    bundled = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    for name in ("cuobjdump", "nvdisasm"):
        for cand in (shutil.which(name), os.path.join(bundled, name)):
            if cand and os.path.exists(cand):
                yield name, cand
                break


def _sass(kernel) -> str:
    cubin = kernel.asm.get("cubin")
    if cubin is None:
        return ""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        for name, path in _tools():
            args = [path, "-sass", f.name] if name == "cuobjdump" else [path, f.name]
            try:
                return subprocess.run(args, capture_output=True, text=True, check=True).stdout
            except (OSError, subprocess.CalledProcessError):
                continue
    return ""


def _jit_functions(package: str) -> list:
    """Every @triton.jit / @gluon.jit function defined in ``lowbit.ops.<package>`` and its modules."""
    from triton.runtime.jit import JITFunction

    pkg = importlib.import_module(f"lowbit.ops.{package}")
    mods = [pkg] + [importlib.import_module(f"{pkg.__name__}.{i.name}") for i in pkgutil.iter_modules(pkg.__path__)]
    fns = {id(v): v for m in mods for v in vars(m).values() if isinstance(v, JITFunction)}
    return list(fns.values())


def _cached(fns, dev) -> dict:
    return {id(k): k for fn in fns for k in fn.device_caches[dev][0].values()}


def _compiled_by(launch, fns) -> list:
    """The kernels of ``fns`` that ``launch()`` compiled."""
    dev = torch.cuda.current_device()
    before = _cached(fns, dev)
    launch()
    torch.cuda.synchronize()
    return [k for i, k in _cached(fns, dev).items() if i not in before]


def _judge(op: str, m: int, kernel) -> tuple[bool, bool]:
    """Print one kernel's report; (its FP8 path is right or it has no MMA, it used wgmma e4m3)."""
    ptx, sass = kernel.asm.get("ptx", ""), _sass(kernel)
    wgmma = sorted(set(re.findall(r"wgmma\.mma_async[\w.]*e4m3[\w.]*", ptx)))
    mma8 = sorted(set(re.findall(r"mma\.sync[\w.]*e4m3[\w.]*", ptx)))
    any_mma = re.search(r"\b(wgmma\.mma_async|mma\.sync)", ptx) is not None
    n_cvt = len(re.findall(r"cvt\.rn\.f16x2\.e4m3x2", ptx))
    gmma = sorted(set(re.findall(r"\b[QH]GMMA\.[\w.]+", sass)))
    n_hmma = len(re.findall(r"\bHMMA\.16816\.F32", sass))
    n_f2fp = len(re.findall(r"F2FP\.F16\.E4M3", sass))
    name = kernel.name
    print(f"{op} M={m} {name}: regs {getattr(kernel, 'n_regs', '?')}, spills {getattr(kernel, 'n_spills', '?')}; "
          f"PTX wgmma fp8 {wgmma or '-'}, mma.sync fp8 {mma8 or '-'}, cvt e4m3->f16x2 x{n_cvt}; "
          f"SASS {gmma[:4] or '-'}, HMMA.16816 x{n_hmma}, F2FP.F16.E4M3 x{n_f2fp}"
          + ("" if sass else " (no disassembler: SASS not checked)"))
    if not any_mma:
        return True, False
    ok = True
    if wgmma:
        if sass and not any("E4M3" in g or g.startswith("QGMMA") for g in gmma):
            ok = False
            print(f"  !! {name}: wgmma e4m3 in the PTX but no QGMMA / .E4M3 GMMA in the SASS")
    elif n_cvt:  # the decode GEMV: exact E4M3 -> fp16, then fp16 mma.sync
        if sass and not (n_f2fp and n_hmma):
            ok = False
            print(f"  !! {name}: the E4M3 -> fp16 conversion or the HMMA is missing from the SASS")
    elif not mma8:
        ok = False
        print(f"  !! {name}: an MMA without FP8 operands or the exact E4M3 conversion (upcast to fp16 / bf16?)")
    return ok, bool(wgmma)


def main() -> int:
    from lowbit.formats import FP8, MXFP4
    from lowbit.ops import fp4_gemm, fp8_gemm

    cap = torch.cuda.get_device_capability()
    print(f"device: {torch.cuda.get_device_name()} sm_{cap[0]}{cap[1]}; disassemblers: {[n for n, _ in _tools()]}")
    b8 = FP8.quantize(torch.randn(N, K, device="cuda"), "block", 128)
    b4 = MXFP4.quantize(torch.randn(N, K, device="cuda"))
    ok, prefill_wgmma = True, False
    for op, fns, call in (("fp8_gemm", _jit_functions("fp8_gemm"), lambda a: fp8_gemm(a.data, a.scale, b8.data, b8.scale)),
                          ("fp4_gemm", _jit_functions("fp4_gemm"), lambda a: fp4_gemm(a.data, a.scale, b4.packed, b4.scale))):
        for m in MS:
            a = FP8.quantize(torch.randn(m, K, device="cuda"), "group", 128)
            compiled = _compiled_by(lambda: call(a), fns)
            if not compiled:
                print(f"{op} M={m}: nothing newly compiled (served by a kernel listed above)")
            for kern in compiled:
                good, used_wgmma = _judge(op, m, kern)
                ok &= good
                prefill_wgmma |= used_wgmma and m >= 512
    if cap[0] == 9 and not prefill_wgmma:
        ok = False
        print("!! no kernel at prefill size used wgmma e4m3 on sm_90")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
