"""Compile the fp8_gemm / fp4_gemm kernels on the GPU and grep their PTX / SASS for the FP8 MMA path.

On sm_90 the prefill tile should show ``wgmma.mma_async ... .e4m3.e4m3`` in the PTX and ``QGMMA``
in the SASS; decode tiles (swap-AB) also use wgmma with a narrow N. Prints what each config
compiled to and exits non-zero when a config expected to use wgmma does not.

    python scripts/check_sass.py
"""
from __future__ import annotations

import re
import subprocess
import sys
import tempfile

import torch


def _sass(kernel) -> str:
    cubin = kernel.asm.get("cubin")
    if cubin is None:
        return ""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        for tool in ("cuobjdump", "nvdisasm"):
            try:
                args = [tool, "-sass", f.name] if tool == "cuobjdump" else [tool, f.name]
                return subprocess.run(args, capture_output=True, text=True, check=True).stdout
            except (OSError, subprocess.CalledProcessError):
                continue
    return ""


def main() -> int:
    from lowbit.formats import FP8, MXFP4
    from lowbit.ops.fp4_gemm import triton as fp4_tr
    from lowbit.ops.fp8_gemm import triton as fp8_tr

    ok = True
    for m in (1, 16, 64, 4096):
        a = FP8.quantize(torch.randn(m, 2048, device="cuda"), "group", 128)
        b8 = FP8.quantize(torch.randn(1024, 2048, device="cuda"), "block", 128)
        b4 = MXFP4.quantize(torch.randn(1024, 2048, device="cuda"))
        for name, launch, kernel in (
            ("fp8_gemm", lambda: fp8_tr.fp8_gemm(a.data, a.scale, b8.data, b8.scale), fp8_tr._fp8_gemm_kernel),
            ("fp4_gemm", lambda: fp4_tr.fp4_gemm(a.data, a.scale, b4.packed, b4.scale), fp4_tr._fp4_gemm_kernel),
        ):
            launch()
            torch.cuda.synchronize()
            compiled = list(kernel.device_caches[torch.cuda.current_device()][0].values())
            ptx = "\n".join(k.asm.get("ptx", "") for k in compiled)
            sass = "\n".join(_sass(k) for k in compiled)
            wgmma = sorted(set(re.findall(r"wgmma\.mma_async[\w.]*e4m3[\w.]*", ptx)))
            mma = sorted(set(re.findall(r"mma\.sync[\w.]*e4m3[\w.]*", ptx)))
            qgmma = len(re.findall(r"QGMMA", sass))
            print(f"{name} M={m}: ptx wgmma fp8 {wgmma or '-'}; mma.sync fp8 {mma or '-'}; SASS QGMMA x{qgmma}"
                  + ("" if sass else " (no cuobjdump/nvdisasm: SASS not checked)"))
            if not wgmma and not mma:
                ok = False
                print(f"  !! {name} M={m}: no FP8 MMA instruction found (upcast to fp16/bf16?)")
            if m == 4096 and not wgmma:
                ok = False
                print(f"  !! {name} M={m}: the prefill tile did not use wgmma")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
