"""Compile the certified draft head's device kernels for sm_90 without a GPU (what the interpreter
accepts but the sm_90 compiler might reject) and report registers / spills (and, for the fused
argmax, its GPU-wide fences: one is the ticket).

    python -m tests.sm90.certified_head [--k 576] [--n 49152] [--kout 1,16,64]
    python -m tests.sm90.certified_head --dispatch

``--dispatch`` compiles instead what the certified head's launchers launch (the coarse pass as
``coarse_head`` dispatches it -- the tensor-core pass up to ``MMA_MAX_M_CERTIFIED``, the fp32 band
kernels beyond and for the statistical bound and the native FP8 / NVFP4 rows --, then
``certified_select_rerank`` for k = 1 / 16 / 64 and ``fused_argmax`` from ``FUSED_ARGMAX_MIN_M``),
recorded on CPU stand-ins (``compiler.record_launches``) for the benchmark's heads and every M
band, each distinct launch once.

Kernels: ``certified._certified_tail_kernel`` (the fused certify + rescore + fallback launch),
``certified._certify_rescore_kernel`` and ``certified._full_kernel`` (the two-launch form), each
fallback form (``DOT``), ``fused_argmax._fused_argmax_kernel`` (every BM), and
``triton_mma._x_frag_kernel`` finding alpha itself (``FUSED_ALPHA``),
with and without the bound's statistics; bf16 x and weight, the
launcher's constexprs for the given shape.
"""
from __future__ import annotations

import argparse
import os

os.environ.pop("TRITON_INTERPRET", None)  # before triton is imported

from tests.sm90.compiler import (compile_recorded, compile_sm90, distinct_launches, record_launches,  # noqa: E402
                                resource_usage, root_cause, sass_opcodes)

TYPES = {  # argument name -> Triton type (bf16 x / weight)
    "ck_ptr": "*fp32", "clb_ptr": "*fp32", "ci_ptr": "*i64", "blb_ptr": "*fp32", "brest_ptr": "*fp32",
    "x_ptr": "*bf16", "w_ptr": "*bf16", "sel_ptr": "*i32", "val_ptr": "*fp32", "cnt_ptr": "*i32",
    "fbrow_ptr": "*i32", "fbcnt_ptr": "*i32", "done_ptr": "*i32", "tk_ptr": "*i32", "part_ptr": "*i64",
    "arrive_ptr": "*i32", "st_ptr": "*i64", "ov_ptr": "*fp32", "oi_ptr": "*i64", "alpha_ptr": "*fp32",
    "xb_ptr": "*i32", "sx_ptr": "*fp32", "sb_ptr": "*fp32",
    # fused_argmax._fused_argmax_kernel
    "wn_ptr": "*fp32", "bub_ptr": "*fp32", "btok_ptr": "*i32", "lg_ptr": "*i32", "rc_ptr": "*i32",
    "lub_ptr": "*fp32", "ltok_ptr": "*i32", "lrest_ptr": "*fp32", "out_ptr": "*i64", "beta": "fp32",
    "abs_slack": "fp32",
}


def compile_kernel(fn, const: dict, num_warps: int):
    sig = {a: "constexpr" if a in const else TYPES.get(a, "i32") for a in fn.arg_names}
    return compile_sm90(fn, sig, const, num_warps=num_warps)


def _pow2(n: int) -> int:
    return 1 << (int(n) - 1).bit_length() if n > 1 else 1


#: (N, K) of the benchmark's heads (SmolLM2's, 124160 x 5120) and M of every band (the tensor-core
#: pass's 1 / 2-4 / 8 tiles, the band kernels' 16 / 32 / 64, the fused argmax's bands)
DISPATCH_HEADS = ((49152, 576), (124160, 5120))
DISPATCH_MS = (1, 4, 8, 16, 32, 64)


def _stand_in_packing(kind: str, n: int, k: int, bits: int = 8, group: int = 64):
    """A ``CoarsePacking`` of empty CPU tensors shaped like the real one (nothing is quantized: the
    launches only need shapes, dtypes and strides); INTx also with its tensor-core tiling."""
    import torch

    from lowbit.formats import FP8, INTx, NVFP4
    from lowbit.ops.coarse_head import KIND_FP8, KIND_INTX, KIND_NVFP4, CoarsePacking

    if kind == "intx":
        ell = INTx.quantize(torch.zeros(1, k), bits=bits, group_size=group).packed.shape[1]
        ng = ell * (8 // bits) // group
        fmt = INTx(torch.empty(n, ell, dtype=torch.uint8), torch.empty(n, ng, dtype=torch.float16),
                   torch.empty(n, ng, dtype=torch.uint8), bits, group, k)
        packing = CoarsePacking(KIND_INTX, fmt, n, k, bits, group)
        nr, ns = -(-n // 32), -(-(ell // 4) // 16)
        packing._mma = (torch.empty(nr, ns, 4, 32, 4, dtype=torch.int32), torch.empty(nr, ng, 32, dtype=torch.int32))
        return packing
    if kind == "fp8":
        fmt = FP8(torch.empty(n, k, dtype=torch.float8_e4m3fn), torch.empty(n, 1), "row")
        return CoarsePacking(KIND_FP8, fmt, n, k, None, group)
    fmt = NVFP4(torch.empty(n, k // 2, dtype=torch.uint8), torch.empty(n, k // 16, dtype=torch.float8_e4m3fn),
                torch.empty(()))
    return CoarsePacking(KIND_NVFP4, fmt, n, k, None, group)


def dispatch_launches(n: int, k: int, m: int) -> list:
    """The certified head's recorded launches for M rows of x against an n x k bf16 head: the INT8
    g64 copy with the deterministic bound (the default) through ``coarse_head``, then the device
    path's ``certified_select_rerank`` for k = 1 / 16 / 64 and, from ``FUSED_ARGMAX_MIN_M`` rows,
    ``fused_argmax``; and the coarse pass alone for the statistical bound and for FP8 / NVFP4 rows."""
    import torch

    import lowbit.ops.coarse_head as ch
    from lowbit.ops.coarse_head import certified as cf
    from lowbit.ops.coarse_head import fused_argmax as fa
    from lowbit.ops.coarse_head import triton as tr
    from lowbit.ops.coarse_head import triton_mma as tm

    x = torch.empty(m, k, dtype=torch.bfloat16)
    w = torch.empty(n, k, dtype=torch.bfloat16)
    intx = _stand_in_packing("intx", n, k)

    def run():
        out = ch.coarse_head(x, intx, block=128, kcand=4, bound=ch.BOUND_DET)
        for kout in (1, 16, 64):
            cf.certified_select_rerank(out.cand_key, out.cand_lb, out.cand_idx, out.block_lb, out.block_rest, x, w,
                                       kout, 128, ch.new_certified_stats(x.device))
        if m >= ch.FUSED_ARGMAX_MIN_M:
            fa.fused_argmax(x, w, torch.empty(n), 128, ch.new_certified_stats(x.device))
        ch.coarse_head(x, intx, block=128, kcand=4, bound=ch.BOUND_STAT)
        for kind in ("fp8", "nvfp4"):
            ch.coarse_head(x, _stand_in_packing(kind, n, k), block=128, kcand=4, bound=ch.BOUND_DET)

    kernels = [(tm, "_x_alpha_kernel"), (tm, "_x_frag_kernel"), (tm, "_coarse_mma_kernel"),
               (tr, "_x_stats_kernel"), (tr, "_coarse_head_kernel"), (cf, "_certified_tail_kernel"),
               (cf, "_certify_rescore_kernel"), (cf, "_full_kernel"), (fa, "_fused_argmax_kernel")]
    return record_launches(run, kernels, [(ch, "use_triton", lambda *tensors: True)])


def check_dispatch() -> int:
    """Compile every distinct recorded launch of :func:`dispatch_launches` over ``DISPATCH_HEADS`` x
    ``DISPATCH_MS``; the count that failed."""
    launches = [rec for n, k in DISPATCH_HEADS for m in DISPATCH_MS for rec in dispatch_launches(n, k, m)]
    distinct = distinct_launches(launches)
    print(f"{len(launches)} launches recorded, {len(distinct)} distinct", flush=True)
    return compile_recorded(distinct, lambda fn, kw: f"{fn.fn.__name__} "
                            + " ".join(f"{a}={v}" for a, v in kw.items() if a.isupper() and a != "INTERPRET"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--k", type=int, default=576)
    ap.add_argument("--n", type=int, default=49152)
    ap.add_argument("--kout", default="1,16,64")
    ap.add_argument("--dispatch", action="store_true", help="compile what the launchers launch (see above)")
    args = ap.parse_args()
    if args.dispatch:
        return 1 if check_dispatch() else 0
    from lowbit.ops.coarse_head import certified as cf
    from lowbit.ops.coarse_head import triton_mma as tm

    nb = -(-args.n // 128)
    c = nb * 4
    g = max(1, min(cf.FULL_PROGRAMS, -(-args.n // cf.FULL_BN)))
    bkk = min(4096, _pow2(args.k))
    failed = 0
    for k in map(int, args.kout.split(",")):
        kp = max(2, _pow2(k))
        cp = max(kp, _pow2(c))
        tail = dict(K=args.k, BKK=bkk, S=cf.RESCORE_SPLIT, CP=cp, NBP=_pow2(nb), RP=max(kp, 128), KOUT=k, KP=kp)
        full = dict(BN=max(cf.FULL_BN, kp), BK=32, GC=min(_pow2(g), max(1, 1024 // kp)), FB=16, F32=False)
        warps = 8 if max(cp, bkk) >= 2048 else 4
        cases = [("_certify_rescore_kernel", cf._certify_rescore_kernel, tail, warps)]
        for dot in (False, True):
            f = {**full, "DOT": dot}
            cases += [(f"_certified_tail_kernel DOT={dot}", cf._certified_tail_kernel, {**tail, **f}, warps),
                      (f"_full_kernel DOT={dot}", cf._full_kernel, {"K": args.k, "KOUT": k, "KP": kp, **f}, 4)]
        for name, fn, const, w in cases:
            try:
                res = resource_usage(compile_kernel(fn, const, w))
                print(f"k={k} {name}: {res}", flush=True)
            except Exception as e:  # noqa: BLE001
                failed += 1
                print(f"k={k} {name}: FAILED {root_cause(e)}", flush=True)
    from lowbit.ops.coarse_head import fused_argmax as fa

    for band, (bm, w, st, cap, bn) in fa._CONFIGS.items():
        const = dict(K=args.k, BM=bm, BN=bn, BK=64, NBP=_pow2(-(-args.n // bn)), CAP=fa.LIST_CAP,
                     EBK=min(fa.EBK, _pow2(args.k)), TBK=fa.TBK, F32=False, SEM=fa.ROW_SEM, BLOCK_BOUND=fa.BLOCK_BOUND,
                     RC=min(bm, fa.ANSWER_ROWS),
                     CUT=0, **({"MT": 1} if bm >= band else {}))  # MT = 1 is specialised
        names = fa._fused_argmax_kernel.arg_names
        sig = {a: "constexpr" if a in const else TYPES.get(a, "i32") for a in names}
        # the launch specialises these as multiples of 16 (aligned pointers, strides of K % 16 == 0)
        div = [i for i, a in enumerate(names) if a.endswith("_ptr") or a.startswith("stride") or a == "N"]
        try:
            kern = compile_sm90(fa._fused_argmax_kernel, sig, const, divisible=div, num_warps=w, num_stages=st,
                                **({"maxnreg": cap} if cap else {}))
            # one GPU-wide fence is expected (the ticket's acq_rel); more mean a stray default-sem atomic
            fences = sum(op.startswith("MEMBAR") for op in sass_opcodes(kern))
            print(f"_fused_argmax_kernel band {band} BM={bm}: {resource_usage(kern)} MEMBAR:{fences}", flush=True)
        except Exception as e:  # noqa: BLE001
            failed += 1
            print(f"_fused_argmax_kernel BM={bm}: FAILED {root_cause(e)}", flush=True)
    for bits in (2, 8):
        ell = args.k * bits // 8
        for bound in (False, True):
            const = dict(L=ell, NS=-(-(ell // 4) // 16), SHIFT=bits, NCT=1, BOUND=bound, QMAX2=2.0 * (1 << bits),
                         ABLK=1024, OWN_ALPHA=True)
            try:
                res = resource_usage(compile_kernel(tm._x_frag_kernel, const, 4))
                print(f"_x_frag_kernel INT{bits} bound={bound}: {res}", flush=True)
            except Exception as e:  # noqa: BLE001
                failed += 1
                print(f"_x_frag_kernel INT{bits} bound={bound}: FAILED {root_cause(e)}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
