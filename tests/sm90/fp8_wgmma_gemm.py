"""Compile the async-wgmma ``fp8_gemm`` kernels for sm_90 without a GPU and inspect the cubin.

Per config (``lowbit/ops/fp8_gemm/wgmma_gemm.py``: the single-partition kernel and the
warp-specialized one; stages, fp32 / UE8M0 scales, TMA or masked store) it prints: shared memory;
``REG / STACK / SHARED / LOCAL`` (spills show as STACK / LOCAL); ptxas's wgmma notes (C7514 =
wgmma serialized, which would undo the overlap; fails the check); the SASS counts of QGMMA /
WARPGROUP.DEPBAR / WARPGROUP.ARRIVE / FFMA / BAR.SYNC; the K loop as a compressed event string
(see ``events``) and, for two configs, its compressed opcode sequence; and whether the overlap
holds: every run of scale FFMAs (one K block) comes after the wgmma issue of the next block
(QGMMA) and a ``WARPGROUP.DEPBAR.LE 1`` that retires its own block, and no ``DEPBAR.LE 0``
drains the tensor cores inside the loop. Exit status 1 if any config fails.

Compiled like ``compiler.compile_sm90`` but from a ``GluonASTSource``; the signature comes
from the JIT's own specializer applied to CPU stand-ins of the launch arguments.

Run from the repository root: ``python -m tests.sm90.fp8_wgmma_gemm [--verbose] [--dump DIR]``. What
``fp8_gemm``'s dispatch launches is compiled by ``ops_dispatch.py``.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

os.environ.pop("TRITON_INTERPRET", None)  # before triton is imported

from tests.sm90.compiler import cuobjdump, resource_usage, root_cause, sass_lines, sass_opcodes  # noqa: E402

# (name, constexpr / launcher overrides)
CONFIGS = (
    ("128x128 s4 fp32 scales tma-store", dict(stages=4, as_e8m0=False, bs_e8m0=False, n=7168)),
    ("128x128 s3 fp32 scales tma-store", dict(stages=3, as_e8m0=False, bs_e8m0=False, n=7168)),
    ("128x128 s5 fp32 scales tma-store", dict(stages=5, as_e8m0=False, bs_e8m0=False, n=7168)),
    ("128x128 s4 ue8m0 scales tma-store", dict(stages=4, as_e8m0=True, bs_e8m0=True, n=7168)),
    ("128x128 s4 fp32 scales masked-store", dict(stages=4, as_e8m0=False, bs_e8m0=False, n=7170)),
    ("warp-specialized 128x128 s4 fp32 scales tma-store", dict(stages=4, as_e8m0=False, bs_e8m0=False, n=7168, ws=True)),
    ("warp-specialized 128x128 s4 ue8m0 masked-store", dict(stages=4, as_e8m0=True, bs_e8m0=True, n=7170, ws=True)),
)

# configs whose full in-loop opcode sequence is printed (all with --verbose)
SHOW_OPCODES = {CONFIGS[0][0], CONFIGS[-2][0]}


def compile_gluon_sm90(stages: int, as_e8m0: bool, bs_e8m0: bool, n: int, block_m=128, block_n=128, group_m=16,
                       num_warps=8, ws=False, producer_regs=40, pdl=False):
    """``triton.compile`` of ``_fp8_gemm_gluon_kernel`` for sm_90 from a ``GluonASTSource`` whose
    signature comes from the JIT's own specializer applied to CPU stand-ins of the launch args."""
    import torch
    import triton
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import BaseBackend, GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from lowbit.ops.fp8_gemm import wgmma_gemm as g

    m, k = 4096, 7168
    a = torch.empty((m, k), dtype=torch.float8_e4m3fn)
    b = torch.empty((n, k), dtype=torch.float8_e4m3fn)
    a_s = torch.empty((m, k // 128), dtype=torch.uint8 if as_e8m0 else torch.float32)
    b_s = torch.empty((-(-n // 128), k // 128), dtype=torch.uint8 if bs_e8m0 else torch.float32)
    c = torch.empty((m, n), dtype=torch.bfloat16)
    a_l, b_l, c_l = g._smem_layouts(block_m, block_n)
    tma_store = n % 8 == 0
    args = dict(
        a_desc=TensorDescriptor.from_tensor(a, [block_m, 128], a_l), as_ptr=a_s,
        b_desc=TensorDescriptor.from_tensor(b, [block_n, 128], b_l), bs_ptr=b_s, c_ptr=c,
        c_desc=TensorDescriptor.from_tensor(c, [block_m, block_n], c_l) if tma_store else None,
        M=m, N=n, n_kb=k // 128,
    )
    fn = g._fp8_gemm_gluon_ws_kernel if ws else g._fp8_gemm_gluon_kernel
    no_spec = {"M", "n_kb"}  # do_not_specialize in the kernel's decorator
    signature, attrs = {}, {}
    for i, (name, v) in enumerate(args.items()):
        ty, key = native_specialize_impl(BaseBackend, v, False, name not in no_spec, True)
        signature[name] = ty
        if key == "D":  # divisible by 16: what the launch would specialise
            attrs[(i, )] = [["tt.divisibility", 16]]
    constexprs = dict(AS_E8M0=as_e8m0, BS_E8M0=bs_e8m0, TMA_STORE=tma_store, GROUP_M=group_m, NUM_STAGES=stages,
                      num_warps=num_warps)
    if ws:
        constexprs["PRODUCER_REGS"] = producer_regs
    else:
        constexprs["PDL"] = pdl
    if args["c_desc"] is None:
        constexprs["c_desc"] = None
    for name in constexprs:
        signature[name] = "constexpr"
    signature = {p: signature[p] for p in fn.arg_names}
    src = GluonASTSource(fn, signature, constexprs, attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": num_warps})


def compress(ops: list[str]) -> str:
    """'A A A B' -> 'Ax3 B'."""
    out, i = [], 0
    while i < len(ops):
        j = i
        while j < len(ops) and ops[j] == ops[i]:
            j += 1
        out.append(ops[i] + (f"x{j - i}" if j - i > 1 else ""))
        i = j
    return " ".join(out)


def main_loop(lines: list[tuple[int, str, str]]) -> list[tuple[int, str, str]] | None:
    """The K loop: the shortest backward-branch region holding QGMMA and FFMA but no EXIT (the
    persistent tile loop around it is longer; the try-wait retry stubs after EXIT also jump back
    into the loop)."""
    addr = [x[0] for x in lines]
    best = None
    for i, (a, op, rest) in enumerate(lines):
        tgt = re.search(r"0x([0-9a-f]+)", rest) if op.startswith("BRA") else None
        if not tgt or int(tgt.group(1), 16) >= a or int(tgt.group(1), 16) not in addr:
            continue
        body = lines[addr.index(int(tgt.group(1), 16)):i + 1]
        ops = [x[1] for x in body]
        if "EXIT" in ops or not any(o.startswith("QGMMA") for o in ops) or "FFMA" not in ops:
            continue
        if best is None or len(body) < len(best):
            best = body
    return best


def events(body: list[tuple[int, str, str]]) -> list[str]:
    """The loop as synchronisation / math events: Q = QGMMA (wgmma issue), D<n> = WARPGROUP.DEPBAR
    (wait until <= n wgmma groups are in flight), A = WARPGROUP.ARRIVE, F = FFMA, B = BAR.SYNC,
    W = mbarrier try-wait, E = mbarrier arrive (expect-tx before a TMA; in the warp-specialized
    consumer the stage release), T = TMA load, G = global load (scales)."""
    ev = []
    for _, op, rest in body:
        if op.startswith("QGMMA"):
            ev.append("Q")
        elif op.startswith("WARPGROUP.DEPBAR"):
            m = re.search(r"0x([0-9a-f]+)", rest)
            ev.append(f"D{int(m.group(1), 16) if m else 0}")
        elif op.startswith("WARPGROUP.ARRIVE"):
            ev.append("A")
        elif op == "FFMA":
            ev.append("F")
        elif op.startswith("BAR.SYNC"):
            ev.append("B")
        elif op.startswith("SYNCS.PHASECHK"):
            ev.append("W")
        elif op.startswith("SYNCS.ARRIVE"):
            ev.append("E")
        elif op.startswith("UTMALDG"):
            ev.append("T")
        elif op.startswith("LDG"):
            ev.append("G")
    return ev


def overlap_ok(ev: list[str]) -> tuple[bool, str]:
    """Each run of scale FFMAs (one K block) must follow, going backwards around the loop, a wait
    that leaves >= 1 wgmma in flight (D1) and before it the issue of the next block's wgmma (Q),
    with no D0 anywhere in the loop (that would drain the tensor cores every iteration)."""
    if "D0" in ev:
        return False, "a full wgmma drain (DEPBAR 0) inside the loop"
    n = len(ev)
    # FFMA runs: F's separated only by non-wgmma events
    runs, i = [], 0
    while i < n:
        if ev[i] == "F":
            j, cnt = i, 0
            while j < n and ev[j] not in ("Q",) and not ev[j].startswith("D"):
                cnt += ev[j] == "F"
                j += 1
            runs.append((i, cnt))
            i = j
        else:
            i += 1
    if not runs:
        return False, "no FFMA in the loop"
    for start, cnt in runs:
        k = (start - 1) % n
        seen_d = False
        for _ in range(n):
            e = ev[k]
            if e.startswith("D"):
                seen_d = True
            elif e == "Q":
                break
            k = (k - 1) % n
        if not seen_d:
            return False, f"the FFMA run at event {start} is not preceded by a wgmma wait"
    return True, (f"{len(runs)} FFMA runs of {[c for _, c in runs]} FFMA, each after the next block's "
                  f"wgmma issue and a DEPBAR.LE 1 (never 0); {ev.count('A')} wgmma groups (ARRIVE) per trip")


def ptxas_notes(kernel) -> list[str]:
    """ptxas -v performance notes (C75xx: injected wgmma waits / serialized wgmma) on the PTX."""
    import triton

    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
    if not os.path.exists(tool):
        return ["(ptxas not found)"]
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "k.ptx")
        with open(src, "w") as f:
            f.write(kernel.asm["ptx"])
        r = subprocess.run([tool, "-v", "--gpu-name=sm_90a", src, "-o", os.path.join(d, "k.o")],
                           capture_output=True, text=True)
    return [ln.strip() for ln in (r.stdout + r.stderr).splitlines() if re.search(r"\(C7\d+\)", ln)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dump", default=None, help="write each config's ttgir / ptx / sass to this folder")
    ap.add_argument("--verbose", action="store_true", help="also print the loop's full opcode sequence")
    args = ap.parse_args()
    failed = False
    for name, cfg in CONFIGS:
        t = time.monotonic()
        try:
            k = compile_gluon_sm90(**cfg)
        except Exception as e:  # noqa: BLE001
            print(f"{name}: FAILED {root_cause(e)}", flush=True)
            failed = True
            continue
        sass = cuobjdump(k, "-sass")
        ops = sass_opcodes(k)
        count = lambda p: sum(o.startswith(p) for o in ops)  # noqa: E731
        print(f"== {name}  ({time.monotonic() - t:.1f}s)")
        print(f"  shared {k.metadata.shared} B   {resource_usage(k)}")
        wg = sorted(set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+)", k.asm["ptx"])))
        waits = sorted(set(re.findall(r"wgmma\.wait_group\.sync\.aligned (\d+)", k.asm["ptx"])))
        print(f"  ptx wgmma shapes {wg}   wgmma.wait_group {waits}")
        notes = ptxas_notes(k)
        print(f"  ptxas wgmma notes: {notes if notes else 'none (no serialized wgmma, no injected waits)'}")
        failed |= any("C7514" in x for x in notes)
        print(f"  SASS: QGMMA {count('QGMMA')}  WARPGROUP.DEPBAR {count('WARPGROUP.DEPBAR')}  "
              f"WARPGROUP.ARRIVE {count('WARPGROUP.ARRIVE')}  FFMA {sum(o == 'FFMA' for o in ops)}  "
              f"BAR.SYNC {count('BAR.SYNC')}  SYNCS {count('SYNCS')}  STG {count('STG')}  UTMASTG {count('UTMASTG')}")
        body = main_loop(sass_lines(sass))
        if body is None:
            print("  main loop: NOT FOUND")
            failed = True
        else:
            ev = events(body)
            ok, why = overlap_ok(ev)
            print(f"  overlap {'OK' if ok else 'NOT SHOWN'}: {why}")
            print(f"  loop events ({len(body)} instructions): {compress(ev)}")
            if args.verbose or name in SHOW_OPCODES:
                print(f"  loop opcodes: {compress([x[1] for x in body])}")
            failed |= not ok
        if cfg.get("ws"):
            regs = sorted(set(re.findall(r"setmaxnreg\.(inc|dec)\.sync\.aligned\.u32\s+(\d+)", k.asm["ptx"])))
            print(f"  warp-specialized register reallocation (setmaxnreg): {regs} (REG above is the launch count)")
        if args.dump:
            os.makedirs(args.dump, exist_ok=True)
            tag = re.sub(r"\W+", "_", name)
            for ext in ("ttgir", "llir", "ptx"):
                with open(os.path.join(args.dump, f"{tag}.{ext}"), "w") as f:
                    f.write(k.asm[ext])
            with open(os.path.join(args.dump, f"{tag}.sass"), "w") as f:
                f.write(sass)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
