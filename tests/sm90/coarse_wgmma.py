"""Compile the int8-wgmma coarse pass (``lowbit/ops/coarse_head/gluon_wgmma.py``) for sm_90 without
a GPU and report per config: registers / spills / shared memory, the SASS opcode counts of
the stage loop and ptxas's performance notes (a serialized wgmma chain shows as C7513).

Run from the repository root: ``python -m tests.sm90.coarse_wgmma [--dump DIR]``.
"""
from __future__ import annotations

import argparse
import os
import sys

os.environ.pop("TRITON_INTERPRET", None)  # before triton is imported


from tests.sm90.compiler import (compile_gluon_sm90, compile_recorded, loop_report, ptxas_notes,  # noqa: E402
                                record_launches)


def k_loop(lines):
    """Opcodes of the smallest backward-branch region that holds every IGMMA: the stage loop."""
    import re

    addr = [a for a, _, _ in lines]
    ig = [i for i, (_, o, _) in enumerate(lines) if o.startswith("IGMMA")]
    best = None
    for i, (a, op, rest) in enumerate(lines):
        m = re.search(r"0x([0-9a-f]+)", rest) if op.startswith("BRA") else None
        if not m or int(m.group(1), 16) >= a or int(m.group(1), 16) not in addr:
            continue
        j = addr.index(int(m.group(1), 16))
        if ig and j <= ig[0] and i >= ig[-1] and (best is None or i - j < best[1] - best[0]):
            best = (j, i)
    return [] if best is None else [o for _, o, _ in lines[best[0]:best[1] + 1]]

CONFIGS = (  # (bits, NB, block, STAGES, KCAND, PIPE, MAGIC, CH, maxnreg, TABLE)
    (2, 8, 128, 4, 8, False, False, 1, None, False),
    (2, 8, 128, 3, 8, False, False, 2, None, False),
    (2, 16, 128, 4, 8, False, False, 1, None, False),
    (2, 16, 128, 3, 8, False, False, 2, None, False),
    (2, 64, 128, 3, 8, False, False, 1, None, False),
    (2, 64, 128, 2, 8, False, False, 2, None, False),
    (2, 64, 128, 3, 8, False, False, 1, 128, False),
    (4, 16, 128, 4, 8, False, False, 2, None, False),
    (4, 64, 128, 3, 8, False, False, 1, 128, False),
    (2, 8, 128, 4, 8, False, False, 1, None, True),
    (2, 16, 128, 4, 8, False, False, 1, None, True),
    (2, 64, 128, 3, 8, False, False, 1, None, True),
    (2, 64, 128, 3, 8, False, False, 1, 128, True),
    (2, 8, 128, 4, 8, False, False, 1, None, "ws"),  # the warp-specialized loop is unrolled by the ring:
    (2, 16, 128, 4, 8, False, False, 1, None, "ws"),  # its "loop" counts STAGES stages
    (2, 64, 128, 3, 8, False, False, 1, None, "ws"),
    (2, 8, 128, 4, 8, False, False, 1, 64, "ws"),  # the shipped caps (MAXNREG_WS)
    (2, 64, 128, 3, 8, False, False, 1, 96, "ws"),
    (2, 8, 128, 4, 8, False, False, 1, 64, "wsx"),  # x as side-by-side tiles (X_WIDE)
    (2, 16, 128, 4, 8, False, False, 1, 64, "wsx"),
    (2, 32, 128, 4, 8, False, False, 1, 64, "wsx"),
    (2, 8, 128, 3, 8, False, False, 2, 64, "wsx"),  # two 64-byte chunks a stage (WS_CHUNKS)
    (2, 16, 128, 3, 8, False, False, 2, 64, "wsx"),
    (2, 16, 128, 4, 8, False, False, 1, 80, "wsx"),  # the shipped configs
    (2, 32, 128, 4, 8, False, False, 1, 80, "wsx"),
    (2, 64, 128, 3, 8, False, False, 1, None, "tx"),  # single-partition whole-row loop, x side by side
    (4, 8, 128, 4, 8, False, False, 1, 80, "wsg"),  # per group, warp-specialized (MAXNREG_WS_GROUP)
    (4, 16, 128, 4, 8, False, False, 1, 80, "wsg"),
    (4, 32, 128, 4, 8, False, False, 1, 80, "wsg"),
    (4, 64, 128, 3, 8, False, False, 1, 80, "wsg"),
    (2, 8, 128, 4, 8, False, False, 1, 80, "wsg"),
    (2, 8, 128, 4, 8, False, False, 1, 56, "wsx"),  # three CTAs an SM (MAXNREG_WS 8 / 16,
    (2, 16, 128, 4, 8, False, False, 1, 56, "wsx"),  # MAXNREG_WS_GROUP 16)
    (4, 16, 128, 4, 8, False, False, 1, 56, "wsg"),
    (2, 8, 128, 4, 8, False, False, 1, 64, "wsxr"),  # x resident (X_RESIDENT)
    (4, 8, 128, 4, 8, False, False, 1, 80, "wsgr"),
    (2, 64, 128, 4, 8, False, False, 1, None, "tx", 2),  # a program spanning two blocks (SPAN)
    (2, 64, 128, 4, 8, False, False, 1, 128, "tx", 2),
    (2, 64, 128, 4, 8, False, False, 1, 96, "wsx", 2),
    (2, 32, 128, 5, 8, False, False, 1, 96, "wsx", 2),
    (2, 8, 128, 6, 8, False, False, 1, 96, "wsx", 2),
    (4, 64, 128, 4, 8, False, False, 1, 96, "wsg", 2),
    (4, 8, 128, 6, 8, False, False, 1, 96, "wsg", 2),
    (4, 8, 128, 4, 8, False, 2, 1, 80, "wsg"),  # per group, the wgmmas started from the zero point and
    (4, 16, 128, 4, 8, False, 2, 1, 56, "wsg"),  # the magic offset (WS_MAGIC_GROUP_NB), and the plain
    (4, 32, 128, 4, 8, False, 2, 1, 80, "wsg"),  # magic add (1)
    (4, 16, 128, 4, 8, False, 1, 1, 56, "wsg"),
)


def compile_sm90(bits, nb, block, stages, kcand, pipe, magic, ch, maxnreg, table=False, span=1, sorted_emit=None,
                 n=124160, k=5120, parts=1, gpipe=None, hi=None, early=False, xr=None, negxs=False):
    import torch
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from lowbit.ops.coarse_head import gluon_wgmma as g

    if gpipe is None:  # the per-group kernel's pipelined planes as the module ships them
        gpipe = nb in g.WS_PIPE_GROUP
    if sorted_emit is None:  # the candidate epilogue the module ships (EMIT_SORTED, EMIT_INT_KEYS)
        sorted_emit = g._emit_mode()
    p = 8 // bits
    ell = k // p
    ns = ell // 64
    packed = torch.empty((n, ell), dtype=torch.uint8)
    whole_row = table not in (False, "wsg", "wsgr")
    xres = ns * ch if table in ("wsxr", "wsgr") else 0
    if whole_row:  # the whole-row variant's group codes: one [2, R] box a 64-byte chunk
        sz = torch.empty((2 * ns, -(-n // 4) * 4), dtype=torch.int32)
    else:  # the fp16 scales and zero bytes, stage-major: a [P, R] and a [1, R] box a 64-byte chunk
        sz = torch.empty((2 * p + 1) * ns * (-(-n // 16) * 16), dtype=torch.uint8)
    wide = table in ("wsx", "tx", "wsg", "wsxr", "wsgr")
    xq = torch.empty((ns * 2 * nb, 32 * p) if wide else (ns * p * 2 * nb, 32), dtype=torch.int8)
    xs = torch.empty((ns * 4, nb), dtype=torch.int32)
    rows = block * span  # rows a program (``coarse_wgmma``'s span)
    w_l, sz_l, x_l, xs_l = g._layouts(rows, nb, ch)
    nblk = -(-n // block)
    args = dict(w_desc=TensorDescriptor.from_tensor(packed, [rows, 64 * ch], w_l),
                sz_desc=(TensorDescriptor.from_tensor(sz, [2, rows], sz_l) if whole_row
                         else TensorDescriptor.from_tensor(g.wgmma_sz_views(sz, bits, ell)[0], [p, rows],
                                                           g._plain_layout(16))),
                x_desc=(TensorDescriptor.from_tensor(xq, [xr or nb, 32 * p], g._wide_layout(p)) if wide
                        else TensorDescriptor.from_tensor(xq, [2 * nb, 32], x_l)),
                xs_desc=TensorDescriptor.from_tensor(xs, [4, nb], xs_l),
                sx_ptr=torch.empty(nb), r_ptr=torch.empty(n), ck_ptr=torch.empty(nb, nblk * kcand),
                ci_ptr=torch.empty(nb, nblk * kcand, dtype=torch.int64), lg_ptr=torch.empty(1),
                M=nb, N=n, NBLK=nblk, NS=ns // ch, **({"GRID": nblk} if table in ("ws", "wsx", "wsg", "wsxr", "wsgr") else {}))
    # the zero bytes' descriptor (whole-row: the group codes' stands in, unread, as in the launcher)
    args["z_desc"] = (args["sz_desc"] if whole_row else
                      TensorDescriptor.from_tensor(g.wgmma_sz_views(sz, bits, ell)[1], g._zero_box(rows),
                                                   g._plain_layout(8)))
    w = rows // 16
    reg = {"maxnreg": maxnreg} if maxnreg else {}
    if table in ("ws", "wsx", "wsg", "wsxr", "wsgr"):  # the warp-specialized kernel (per group: "wsg*"; x
        # resident: "*r")
        constexprs = dict(NB=nb, P=p, STAGES=stages, KCAND=kcand, WRITE_LOGITS=False, W=w,
                          PRODUCER_REGS=g.PRODUCER_REGS, XW=wide, CH=ch, PDL=True, TABLE=whole_row, BITS=bits,
                          XRES=xres, SUB=span, EMIT=sorted_emit, LATE=nb >= g.LATE_TRIGGER_MIN_NB, PARTS=parts,
                          GPIPE=gpipe and not whole_row, GMAGIC=0 if whole_row else int(magic),
                          HI=bits == 4 and not whole_row and (nb in g.INT4_HIGH_NIBBLE_NB if hi is None else hi),
                          EARLY=early and not xres,  # the first weight stages before the PDL wait (EARLY_RING)
                          HALVES=1, CONSUMER_REGS=0,  # one consumer partition (SPLIT_SPAN: see --dispatch)
                          NEGXS=negxs and not whole_row)  # the x sums negated (NEG_XSUM)
        # the split tail (gluon_wgmma.SPLIT_TAIL): partial sums and tickets (unread with parts = 1)
        args.update(part_ptr=torch.empty(1, dtype=torch.int32 if whole_row else torch.float32),
                    tick_ptr=torch.empty(1, dtype=torch.int32), FULL=nblk - 46 if parts > 1 else nblk)
        return compile_gluon_sm90(g._coarse_ws_kernel, args, constexprs, {"M", "N", "NBLK", "NS", "GRID", "FULL"},
                                  num_warps=w, **reg)
    constexprs = dict(NB=nb, P=p, BITS=bits, STAGES=stages, KCAND=kcand, WRITE_LOGITS=False, W=w, PIPE=pipe,
                      MAGIC=magic, CH=ch, TABLE=whole_row, XW=wide, SUB=span, EMIT=sorted_emit,
                      HI=bits == 4 and not whole_row and (nb in g.INT4_HIGH_NIBBLE_NB if hi is None else hi),
                      NEGXS=negxs and not whole_row)
    return compile_gluon_sm90(g._coarse_wgmma_kernel, args, constexprs, {"M", "N", "NBLK", "NS"}, num_warps=w, **reg)


def x_tile_shapes(x, ell, planes, nb, perm=False, wide=False, trigger=False, neg_sums=False):
    """``x_int8.x_int8_tiles``' outputs as empty CPU tensors of their shapes (nothing is computed)."""
    import torch

    ns = ell // 64
    xq = torch.empty((ns * 2 * nb, 32 * planes) if wide else (ns * planes * 2 * nb, 32), dtype=torch.int8)
    return xq, torch.empty((ns * 4, nb), dtype=torch.int32), torch.empty(nb)


def dispatch_launches(bits: int, m: int, n: int = 124160, k: int = 5120, sms: int = 132, table: bool | None = None,
                      **options) -> list:
    """The Gluon launches ``gluon_wgmma.coarse_wgmma`` makes for an INT``bits`` head of ``n`` x ``k``
    (g64, block 128, kcand 8) and ``m`` rows of x on a GPU of ``sms`` SMs, recorded instead of run:
    [(kernel, positional args, keyword args)]. CPU tensors stand in (nothing is read); the x
    preparation is replaced by its outputs' shapes. ``table`` (default: INT2) the whole-row variant;
    ``options``: ``coarse_wgmma``'s keyword overrides (``early``, ``x_rows_box``, ``chunks``, ...)."""
    import torch

    from lowbit.formats import INTx
    from lowbit.ops.coarse_head import gluon_wgmma as g
    from lowbit.ops.coarse_head import x_int8

    table = bits in g.TABLE_BITS if table is None else table
    ell = INTx.quantize(torch.zeros(1, k), bits=bits, group_size=64).packed.shape[1]  # the plane as packed (padded)
    ns = ell // 64
    packed = torch.empty((n, ell), dtype=torch.uint8)
    if table:
        sz, r = torch.empty((2 * ns, -(-n // 4) * 4), dtype=torch.int32), torch.empty(n)
    else:
        sz, r = torch.empty(g.wgmma_sz_bytes(n, bits, ell), dtype=torch.uint8), None

    return record_launches(
        lambda: g.coarse_wgmma(torch.empty((m, k), dtype=torch.bfloat16), packed, sz, n=n, bits=bits, block=128,
                               kcand=8, write_logits=False, table_r=r, **options),
        [(g, "_coarse_ws_kernel"), (g, "_coarse_wgmma_kernel")],
        [(g, "sm_count", lambda device, interpret: sms), (g, "interpret_mode", lambda: False),  # PDL as on the GPU
         (x_int8, "x_int8_tiles", x_tile_shapes)])


def check_dispatch(cases) -> int:
    """Compile every Gluon launch of the dispatch for ``cases`` [(bits, M, options)] for sm_90, one
    line each (registers, spills, ptxas's wgmma notes, the wgmmas in the cubin); the count of
    launches that failed."""
    failed = 0
    for bits, m, opts in cases:
        failed += compile_recorded(
            dispatch_launches(bits, m, **opts),
            lambda fn, kw: f"INT{bits} M = {m} {opts or ''} {fn.fn.__name__} NB {kw.get('NB')}", "IGMMA")
    return failed


#: (bits, M, coarse_wgmma options) of ``--dispatch``: every M band of both bit widths as shipped,
#: then the optional launches (tuning overrides and the prepared switches)
DISPATCH_CASES = tuple((b, m, {}) for b in (2, 4) for m in (1, 8, 16, 32, 64)) + (
    (2, 1, {"early": True, "x_rows_box": True}), (4, 1, {"early": True, "x_rows_box": True, "neg_xsum": True}),
    (4, 16, {"neg_xsum": True}), (4, 8, {"chunks": 2}), (4, 8, {"chunks": 2, "ws": False}),
    (2, 8, {"chunks": 2}), (2, 16, {"persist": True}), (4, 8, {"persist": True, "resident": True}),
    (4, 1, {"ws": False}), (2, 4, {"table": False}), (2, 64, {"split_span": True}), (4, 64, {"split_span": True}),
    (2, 16, {"span": 2, "split_span": True}), (4, 8, {"span": 2, "split_span": True})) + tuple(
    (b, m, {"n": n, "k": k}) for n, k in ((49152, 576), (128256, 4096)) for b in (2, 4) for m in (1, 16, 64))
# (the benchmark's other heads: SmolLM2's 49152 x 576 -- 3 stages a plane (INT2), so no three CTAs
# an SM and no spanning programs -- and 128256 x 4096)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dispatch", action="store_true",
                    help="compile what the dispatch launches (DISPATCH_CASES) instead of CONFIGS; exit 1 on a failure")
    ap.add_argument("--dump", default=None)
    ap.add_argument("--table-only", action="store_true",
                    help="only the whole-row / warp-specialized configs (the last column set)")
    ap.add_argument("--span-only", action="store_true", help="only the configs of programs spanning two blocks")
    ap.add_argument("--maxnreg", type=int, default=None, help="only the configs with this register cap")
    args = ap.parse_args()
    if args.dispatch:
        return 1 if check_dispatch(DISPATCH_CASES) else 0
    for cfg in CONFIGS:
        if (args.table_only and not cfg[9]) or (args.span_only and len(cfg) < 11):
            continue
        if args.maxnreg is not None and cfg[8] != args.maxnreg:
            continue
        kern = compile_sm90(*cfg)
        span = cfg[10] if len(cfg) > 10 else 1
        loop_report(kern, f"bits {cfg[0]} NB {cfg[1]} block {cfg[2]} stages {cfg[3]} kcand {cfg[4]} pipe {cfg[5]} "
                    f"magic {cfg[6]} ch {cfg[7]} maxnreg {cfg[8]} table {cfg[9]} span {span}", k_loop, top=18,
                    dump_dir=args.dump, dump_name=f"b{cfg[0]}_nb{cfg[1]}_blk{cfg[2]}_p{int(cfg[5])}_m{int(cfg[6])}"
                                                  f"_c{cfg[7]}_r{cfg[8]}_t{cfg[9]}_s{span}.sass")
        for note in ptxas_notes(kern):  # a serialized wgmma chain (C7513) costs more than any loop trim
            print(f"    ptxas: {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
