"""Compile the fp8_gemm / fp4_gemm kernels on the GPU and grep their PTX / SASS for the FP8 MMA path.

On sm_90 the tiles should show ``wgmma.mma_async ... .e4m3.e4m3`` in the PTX and ``QGMMA`` (or
``HGMMA`` with an ``.E4M3`` operand type) in the SASS. Prints what each config compiled to
(registers, spills, the MMA instructions) and exits non-zero when a config expected to use wgmma
does not. The disassembler is ``cuobjdump`` / ``nvdisasm`` from PATH or from Triton's package.

    python scripts/check_sass.py
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile

import torch


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


def _compiled_by(launch, jit_fns) -> list:
    """The kernels of ``jit_fns`` that ``launch()`` compiled (all cached ones if it compiled none)."""
    dev = torch.cuda.current_device()
    before = {id(k) for fn in jit_fns for k in fn.device_caches[dev][0].values()}
    launch()
    torch.cuda.synchronize()
    compiled = [k for fn in jit_fns for k in fn.device_caches[dev][0].values() if id(k) not in before]
    return compiled or [k for fn in jit_fns for k in fn.device_caches[dev][0].values()]


def _report(name: str, m: int, launch, jit_fns, need_wgmma: bool) -> bool:
    compiled = _compiled_by(launch, jit_fns)
    ptx = "\n".join(k.asm.get("ptx", "") for k in compiled)
    sass = "\n".join(_sass(k) for k in compiled)
    wgmma = sorted(set(re.findall(r"wgmma\.mma_async[\w.]*e4m3[\w.]*", ptx)))
    mma = sorted(set(re.findall(r"mma\.sync[\w.]*e4m3[\w.]*", ptx)))
    gmma = sorted(set(re.findall(r"\b[QH]GMMA\.[\w.]+", sass)))
    n_gmma = len(re.findall(r"\b[QH]GMMA\.", sass))
    regs = [(k.name, getattr(k, "n_regs", "?"), getattr(k, "n_spills", "?")) for k in compiled]
    print(f"{name} M={m}: kernels(name, regs, spills)={regs}")
    print(f"  PTX wgmma fp8: {wgmma or '-'}; mma.sync fp8: {mma or '-'}")
    print(f"  SASS GMMA x{n_gmma}: {gmma[:6] or '-'}" + ("" if sass else " (no cuobjdump/nvdisasm: SASS not checked)"))
    ok = True
    if not wgmma and not mma:
        ok = False
        print(f"  !! {name} M={m}: no FP8 MMA instruction in the PTX (upcast to fp16/bf16?)")
    if need_wgmma and not wgmma:
        ok = False
        print(f"  !! {name} M={m}: no wgmma")
    if sass and wgmma and not any("E4M3" in g or g.startswith("QGMMA") for g in gmma):
        ok = False
        print(f"  !! {name} M={m}: SASS has no QGMMA / .E4M3 GMMA")
    return ok


def _report_gemv(name: str, m: int, launch) -> bool:
    """The decode GEMV (fp8_gemm/triton_mma.py): sm_90 has no E4M3 ``mma.sync`` unit, so the
    kernel converts E4M3 -> fp16 exactly (``cvt.rn.f16x2.e4m3x2``, SASS ``F2FP.F16.E4M3``) and
    runs fp16 ``HMMA.16816``; check both are there."""
    from lowbit.ops.fp8_gemm import triton_mma

    compiled = _compiled_by(launch, [triton_mma._mma_gemv_kernel])
    ptx = "\n".join(k.asm.get("ptx", "") for k in compiled)
    sass = "\n".join(_sass(k) for k in compiled)
    n_cvt = len(re.findall(r"cvt\.rn\.f16x2\.e4m3x2", ptx))
    n_f2fp = len(re.findall(r"F2FP\.F16\.E4M3", sass))
    n_hmma = len(re.findall(r"\bHMMA\.16816\.F32", sass))
    regs = [(k.name, getattr(k, "n_regs", "?"), getattr(k, "n_spills", "?")) for k in compiled]
    print(f"{name} M={m} (mma_gemv): kernels(name, regs, spills)={regs}")
    print(f"  PTX cvt.rn.f16x2.e4m3x2 x{n_cvt}; SASS F2FP.F16.E4M3 x{n_f2fp}, HMMA.16816.F32 x{n_hmma}")
    ok = n_cvt > 0 and (not sass or (n_f2fp > 0 and n_hmma > 0))
    if not ok:
        print(f"  !! {name} M={m}: the E4M3 -> fp16 conversion or the HMMA is missing")
    return ok


def main() -> int:
    from lowbit.formats import FP8, MXFP4
    from lowbit.ops.fp4_gemm import triton as fp4_tr
    from lowbit.ops.fp8_gemm import triton as fp8_tr

    print(f"device: {torch.cuda.get_device_name()} sm_{''.join(map(str, torch.cuda.get_device_capability()))}; "
          f"disassemblers: {[n for n, _ in _tools()]}")
    ok = True
    fp8_fns = [fp8_tr._fp8_gemm_kernel, fp8_tr._fp8_gemm_tma_kernel, fp8_tr._split_k_reduce_kernel]
    for m in (1, 16, 64, 4096):
        a = FP8.quantize(torch.randn(m, 2048, device="cuda"), "group", 128)
        b8 = FP8.quantize(torch.randn(1024, 2048, device="cuda"), "block", 128)
        b4 = MXFP4.quantize(torch.randn(1024, 2048, device="cuda"))
        # the wgmma kernels at every M (an explicit band config keeps decode sizes off mma_gemv)
        cfg8 = fp8_tr.pick_config(m)
        cfg4, aligned = fp4_tr.pick_fp4_config(m)
        ok &= _report("fp8_gemm", m, lambda: fp8_tr.fp8_gemm(a.data, a.scale, b8.data, b8.scale, config=cfg8),
                      fp8_fns, need_wgmma=True)
        ok &= _report("fp4_gemm", m, lambda: fp4_tr.fp4_gemm(a.data, a.scale, b4.packed, b4.scale, config=cfg4,
                                                             aligned=aligned), [fp4_tr._fp4_gemm_kernel], need_wgmma=True)
        # what the public functions run at decode sizes
        if m <= fp8_tr.MMA_GEMV_MAX_M_FP8:
            ok &= _report_gemv("fp8_gemm", m, lambda: fp8_tr.fp8_gemm(a.data, a.scale, b8.data, b8.scale))
        if m <= fp8_tr.MMA_GEMV_MAX_M_FP4:
            ok &= _report_gemv("fp4_gemm", m, lambda: fp4_tr.fp4_gemm(a.data, a.scale, b4.packed, b4.scale))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
