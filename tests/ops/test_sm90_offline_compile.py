"""The sm_90 compile of the GPU kernels, without a GPU: what CI can see of code the interpreter
cannot run (Gluon) or runs only through an emulation (inline PTX such as ``mma.sync``, whose
operand constraints only ptxas checks).

Each case runs one of the offline compile checks in ``tests/sm90/`` (``python -m tests.sm90.<module>``)
in a subprocess -- ``TRITON_INTERPRET`` must be unset before Triton is imported, and the test session
has it set -- and fails on a non-zero exit or a "FAILED" line. Every check compiles what the code
launches as dispatched on an sm_90 GPU, recorded on CPU stand-ins: the draft head's pipelines in
both modes (``draft_head``: the int8-wgmma, mma.sync and fp32 coarse passes, the x preparation,
selection, rerank, certified tail and fused argmax at the M bands of two heads), the GEMMs'
routed kernels at every M band of their dispatch tables and the gathered projection's, sparse
attention's, the Sinkhorn split's and the activation quantizers' kernels as their public ops
launch them on the benchmark shapes (``ops_dispatch``), and the K loop of the prefill GEMM
kernels (``fp8_wgmma_gemm``: wgmma and the scale FMAs overlapped). Timing and occupancy are the
GPU tier's business; here only that it compiles, with its tensor-core instructions."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# (module under tests/sm90, arguments, an opcode each compiled configuration's report line must show, or None)
CASES = [
    # every launch of the draft head's pipelines as dispatched on sm_90 (both modes, every coarse copy)
    ("draft_head", [], "REG:"),
    # the GEMMs' routed kernels at every M band of their dispatch tables (QGMMA / HMMA required)
    ("ops_dispatch", ["--ops", "fp8_gemm,fp4_gemm"], "REG:"),
    # gathered, sparse attention, Sinkhorn, act_quant: what their public ops launch on the benchmark shapes
    ("ops_dispatch", ["--ops", "gathered,sparse_attn,hc_sinkhorn,act_quant"], "REG:"),
    ("fp8_wgmma_gemm", [], None),  # the prefill kernels' K loop keeps wgmma and the scale FMAs overlapped
]


def _ptxas_or_skip():
    import triton

    if not (Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas").exists():
        pytest.skip("this Triton has no bundled ptxas to compile for sm_90 with")


def _case_id(case) -> str:
    module, args, _ = case
    if "--ops" in args:
        return f"{module}_{args[args.index('--ops') + 1].split(',')[0]}"
    return module + ("_dispatch" if "--dispatch" in args else "")


def test_cases_name_existing_modules():
    """Every case's module exists (a renamed module would otherwise fail only as a subprocess)."""
    assert all((ROOT / "tests" / "sm90" / f"{module}.py").exists() for module, _, _ in CASES)


@pytest.mark.parametrize("module,args,marker", CASES, ids=[_case_id(c) for c in CASES])
def test_offline_sm90_compile(module, args, marker):
    """The module compiles every configuration it lists for sm_90: exit 0, no "FAILED" line, some
    output (a check that compiled nothing would pass silently otherwise)."""
    _ptxas_or_skip()
    if module == "draft_head":
        from lowbit.ops.coarse_head import wgmma_int8 as g

        if g.GLUON_ERROR is not None:
            pytest.skip(f"triton.experimental.gluon is not available: {g.GLUON_ERROR}")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, "-m", f"tests.sm90.{module}", *args], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=1200)
    out = run.stdout + run.stderr[-4000:]
    assert run.returncode == 0, out
    assert "FAILED" not in run.stdout, out
    assert len(run.stdout.strip().splitlines()) >= 3, out
    if marker:  # one line a compiled configuration, each with the instructions it is about
        lines = [ln for ln in run.stdout.splitlines() if "REG:" in ln]
        assert len(lines) >= (20 if "--dispatch" in args else 1) and all(marker in ln for ln in lines), out
