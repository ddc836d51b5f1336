"""Compile the Gluon ``fp8_gemm`` prefill kernel for sm_90 without a GPU and inspect the cubin.

Prints, per config: shared memory, ``REG / STACK / SHARED / LOCAL`` (spills show as STACK / LOCAL),
the counts of QGMMA / WARPGROUP.DEPBAR / WARPGROUP.ARRIVE / FFMA / BAR.SYNC in the SASS, the main
loop's opcode sequence (runs of one opcode compressed to ``OPx n``), and whether the overlap holds:
inside the loop the scale FFMAs of block kb must come after the wgmma issue of block kb + 1
(QGMMA) and after the ``WARPGROUP.DEPBAR`` that retires block kb (wait with 1 outstanding),
with no second DEPBAR in between that would wait for block kb + 1.

Run from the repository root: ``python scripts/gluon_fp8_offline.py [--dump DIR]``.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import time

os.environ.pop("TRITON_INTERPRET", None)  # before triton is imported

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from sm90_offline import cuobjdump, resource_usage, root_cause, sass_opcodes  # noqa: E402

# (name, constexpr / launcher overrides)
CONFIGS = (
    ("128x128 s4 fp32 scales tma-store", dict(stages=4, as_e8m0=False, bs_e8m0=False, n=7168)),
    ("128x128 s3 fp32 scales tma-store", dict(stages=3, as_e8m0=False, bs_e8m0=False, n=7168)),
    ("128x128 s5 fp32 scales tma-store", dict(stages=5, as_e8m0=False, bs_e8m0=False, n=7168)),
    ("128x128 s4 ue8m0 scales tma-store", dict(stages=4, as_e8m0=True, bs_e8m0=True, n=7168)),
    ("128x128 s4 fp32 scales masked-store", dict(stages=4, as_e8m0=False, bs_e8m0=False, n=7170)),
)


def compile_gluon_sm90(stages: int, as_e8m0: bool, bs_e8m0: bool, n: int, block_m=128, block_n=128, group_m=16,
                       num_warps=8):
    """``triton.compile`` of ``_fp8_gemm_gluon_kernel`` for sm_90 from a ``GluonASTSource`` whose
    signature comes from the JIT's own specializer applied to CPU stand-ins of the launch args."""
    import torch
    import triton
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import BaseBackend, GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from lowbit.ops.fp8_gemm import gluon as g

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
    fn = g._fp8_gemm_gluon_kernel
    no_spec = {"M", "n_kb"}  # do_not_specialize in the kernel's decorator
    signature, attrs = {}, {}
    for i, (name, v) in enumerate(args.items()):
        ty, key = native_specialize_impl(BaseBackend, v, False, name not in no_spec, True)
        signature[name] = ty
        if key == "D":  # divisible by 16: what the launch would specialise
            attrs[(i, )] = [["tt.divisibility", 16]]
    constexprs = dict(AS_E8M0=as_e8m0, BS_E8M0=bs_e8m0, TMA_STORE=tma_store, GROUP_M=group_m, NUM_STAGES=stages,
                      num_warps=num_warps)
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


def main_loop(sass: str) -> list[str] | None:
    """Opcodes of the K loop: the backward branch whose body holds QGMMA and FFMA."""
    lines = re.findall(r"/\*([0-9a-f]{4,})\*/\s+((?:@!?U?P\w+\s+)?[A-Z][A-Z0-9_.]*)([^;]*);", sass)
    addr = [int(x[0], 16) for x in lines]
    ops = [re.sub(r"^@!?U?P\w+\s+", "", x[1]) for x in lines]
    best = None
    for i, (op, (_, _, rest)) in enumerate(zip(ops, lines)):
        if not op.startswith("BRA"):
            continue
        tgt = re.search(r"0x([0-9a-f]+)", rest)
        if not tgt:
            continue
        t = int(tgt.group(1), 16)
        if t >= addr[i]:
            continue
        j = addr.index(t) if t in addr else None
        if j is None:
            continue
        body = ops[j:i + 1]
        # the K loop's back edge (not a try-wait retry stub after EXIT jumping back into it)
        if "EXIT" in body:
            continue
        if any(o.startswith("QGMMA") for o in body) and any(o == "FFMA" for o in body):
            if best is None or len(body) > len(best):
                best = body
    return best


def overlap_ok(body: list[str]) -> tuple[bool, str]:
    """In the loop body: QGMMA (issue kb+1) ... DEPBAR (retire kb) ... FFMA (scale kb), and no
    DEPBAR between the first FFMA and the last FFMA (which would retire kb+1 first)."""
    q = [i for i, o in enumerate(body) if o.startswith("QGMMA")]
    dep = [i for i, o in enumerate(body) if o.startswith("WARPGROUP.DEPBAR")]
    ff = [i for i, o in enumerate(body) if o == "FFMA"]
    if not (q and dep and ff):
        return False, "missing QGMMA / DEPBAR / FFMA in the loop"
    issue_end, first_ff, last_ff = max(q), min(ff), max(ff)
    deps_before = [i for i in dep if i < first_ff]
    if not deps_before or issue_end > first_ff:
        return False, "the FFMAs do not follow the next block's wgmma issue and a wait"
    if any(first_ff < i < last_ff for i in dep):
        return False, "a wgmma wait sits inside the FFMA run"
    dep_ops = sorted({body[i] for i in deps_before})
    return True, (f"QGMMA issue ends at {issue_end}, {dep_ops} at {deps_before}, FFMA {first_ff}..{last_ff} "
                  f"({len(ff)} FFMA) of {len(body)} loop instructions")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dump", default=None, help="write each config's ttgir / ptx / sass to this folder")
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
        print(f"  SASS: QGMMA {count('QGMMA')}  WARPGROUP.DEPBAR {count('WARPGROUP.DEPBAR')}  "
              f"WARPGROUP.ARRIVE {count('WARPGROUP.ARRIVE')}  FFMA {sum(o == 'FFMA' for o in ops)}  "
              f"BAR.SYNC {count('BAR.SYNC')}  SYNCS {count('SYNCS')}  STG {count('STG')}  UTMASTG {count('UTMASTG')}")
        body = main_loop(sass)
        if body is None:
            print("  main loop: NOT FOUND")
            failed = True
        else:
            ok, why = overlap_ok(body)
            print(f"  overlap {'OK' if ok else 'NOT SHOWN'}: {why}")
            print(f"  loop: {compress(body)}")
            failed |= not ok
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
