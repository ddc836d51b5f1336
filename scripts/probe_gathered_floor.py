"""How close can *any* kernel come to ``gathered_bias``'s floor? Time a bare gathered read of the
same bytes in the same timer as the registered benchmark (``lowbit bench --op gathered_bias``).

#8's bar is ``max(one launch, bytes / copy bandwidth)``, where the bytes are the gathered packed
rows and their e4m3 scales, x, the values, the indices and the written logits. A kernel that moves
exactly those bytes and does nothing with them (no decode, no dot: each program XOR-reduces the
words it read, adds the values and stores into the logits at the indices) shows what one launch,
the dependent index -> row round trips and the tail cost on each shape, i.e. the best time a fused
``gathered_bias`` can reach there. Each geometry is launched as the shipped kernel is: a
programmatic dependent launch that waits for the previous kernel and then lets the next one start
(``--no-pdl``: plain launches).

Geometries (``TT`` indices of one batch row a program, the row split in ``S`` parts over programs,
``W`` warps); the best per shape is the bare read. Timed the registered bench's way: CUDA-graph
replay of back-to-back calls rotating over 8 copies of x / values / indices, one NVFP4 table of
V = 131072 rows.

    python3 scripts/probe_gathered_floor.py [--quick] [--contig] [--cases 'K4096 B64 T32,...'] [--json F]

Per shape: floor, the shipped ``gathered_bias``, the best bare read, and both over the floor;
``--contig``: also the same reads over consecutive rows (the byte count without the gather), so
the cost of one launch and a few MB at this size shows apart from the cost of scattered rows.
Needs CUDA.
"""
from __future__ import annotations

import argparse
import itertools
import os
import sys

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from scripts.bench_rows import emit_row, save_rows  # noqa: E402

GEOMETRIES = [  # (TT, S, W)
    (1, 1, 4), (2, 1, 4), (4, 1, 4), (8, 1, 4), (8, 1, 8), (16, 1, 4), (16, 1, 8), (32, 1, 8),
    (2, 2, 4), (4, 2, 4), (8, 2, 8), (4, 4, 4), (8, 4, 4), (16, 4, 8),
]


@triton.jit
def _gathered_read_kernel(x, values, index, packed, scale, logits, T, V,
                          KW: tl.constexpr, SW: tl.constexpr, XW: tl.constexpr,
                          TT: tl.constexpr, S: tl.constexpr,
                          PDL: tl.constexpr, TRIGGER: tl.constexpr):
    """Program (b, t block, part): rows ``index[b, t block]``; reads their packed words
    [KW / S] and scale words [SW / S] of part ``part``, x[b]'s part, the values; stores one bf16 a
    row into ``logits[b, row]`` (a split row's parts all store: a bare read, not a reduction)."""
    pid_b = tl.program_id(0)
    pid_t = tl.program_id(1)
    part = tl.program_id(2)
    if PDL:
        gdc_wait()
        if TRIGGER:
            gdc_launch_dependents()
    t = pid_t * TT + tl.arange(0, TT)
    tmask = t < T
    rows = tl.load(index + pid_b * T + t, mask=tmask, other=0).to(tl.int64)
    kw = part * (KW // S) + tl.arange(0, KW // S)
    w = tl.load(packed + rows[:, None] * KW + kw[None, :], mask=tmask[:, None], other=0)
    acc = tl.xor_sum(w, axis=1)
    if SW >= S:
        sw = part * (SW // S) + tl.arange(0, SW // S)
        sc = tl.load(scale + rows[:, None] * SW + sw[None, :], mask=tmask[:, None], other=0)
        acc ^= tl.xor_sum(sc, axis=1)
    else:  # fewer scale words than parts: part 0 reads them all
        sw = tl.arange(0, SW)
        sc = tl.load(scale + rows[:, None] * SW + sw[None, :], mask=tmask[:, None] & (part == 0), other=0)
        acc ^= tl.xor_sum(sc, axis=1)
    xw = tl.load(x + pid_b * XW + part * (XW // S) + tl.arange(0, XW // S))
    acc ^= tl.xor_sum(xw, axis=0)
    val = tl.load(values + pid_b * T + t, mask=tmask, other=0.0)
    out = (acc & 0xFF).to(tl.float32) + val
    tl.store(logits + pid_b.to(tl.int64) * V + rows, out.to(tl.bfloat16), mask=tmask)


def _launcher(w, inputs, logits, tt, s, warps, pdl):
    v, k = w.packed.shape[0], w.packed.shape[1] * 2
    packed = w.packed.view(torch.int32)
    scale = w.scale.view(torch.int32)
    kw, sw = packed.shape[1], scale.shape[1]
    it = itertools.cycle(inputs)
    opts = {"PDL": True, "TRIGGER": True, "launch_pdl": True} if pdl else {"PDL": False, "TRIGGER": False}

    def run():
        x, values, idx = next(it)
        b, t = idx.shape
        grid = (b, triton.cdiv(t, tt), s)
        _gathered_read_kernel[grid](x.view(torch.int32), values, idx, packed, scale, logits, t, v,
                                    KW=kw, SW=sw, XW=k // 2, TT=tt, S=s, num_warps=warps, **opts)
    return run


def check_reads_the_rows(device="cuda") -> None:
    """One small case against a NumPy XOR of the same words, so the probe reads what it says."""
    import numpy as np

    from lowbit.formats import NVFP4
    k, v, b, t = 256, 64, 2, 8
    w = NVFP4.quantize(torch.randn(v, k, device=device))
    x = torch.randn(b, k, device=device, dtype=torch.bfloat16)
    values = torch.zeros(b, t, device=device)
    idx = torch.stack([torch.randperm(v, device=device)[:t] for _ in range(b)])
    logits = torch.zeros(b, v, device=device, dtype=torch.bfloat16)
    _launcher(w, [(x, values, idx)], logits, 4, 1, 4, False)()
    pk = w.packed.view(torch.int32).cpu().numpy()
    sc = w.scale.view(torch.int32).cpu().numpy()
    xw = x.view(torch.int32).cpu().numpy()
    for bi in range(b):
        for ti in range(t):
            r = int(idx[bi, ti])
            want = (np.bitwise_xor.reduce(pk[r]) ^ np.bitwise_xor.reduce(sc[r]) ^ np.bitwise_xor.reduce(xw[bi])) & 0xFF
            got = float(logits[bi, r])
            assert got == float(torch.tensor(float(want)).to(torch.bfloat16)), (bi, ti, got, want)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="the registered bench's quick shapes only")
    ap.add_argument("--no-pdl", action="store_true", help="plain launches instead of PDL + trigger")
    ap.add_argument("--contig", action="store_true",
                    help="also each geometry on consecutive rows (the same bytes, no gather): read_contig_us")
    ap.add_argument("--cases", default="", help="only these cases, e.g. 'K4096 B64 T32,K1024 B256 T32'")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    from lowbit.bench.gathered import FULL, QUICK, V
    from lowbit.bench.timing import copy_bandwidth_gbps, launch_us, time_us
    from lowbit.formats import NVFP4
    from lowbit.ops import gathered_bias

    check_reads_the_rows()
    bw = copy_bandwidth_gbps()
    launch = launch_us()
    rows: list = []
    emit_row(rows, {"copy_gbps": round(bw, 1), "launch_us": round(launch, 2), "pdl": not args.no_pdl})
    shapes = QUICK if args.quick else FULL
    if args.cases:
        wanted = {c.strip() for c in args.cases.split(",")}
        shapes = [s for s in shapes if f"K{s[0]} B{s[1]} T{s[2]}" in wanted]
    for k in sorted({s[0] for s in shapes}):
        w = NVFP4.quantize(torch.randn(V, k, device="cuda") * 0.02)
        for _, b, t in [s for s in shapes if s[0] == k]:
            inputs = [(torch.randn(b, k, device="cuda", dtype=torch.bfloat16), torch.randn(b, t, device="cuda"),
                       torch.randint(0, V, (b, t), device="cuda")) for _ in range(8)]
            logits = torch.full((b, V), float("-inf"), device="cuda", dtype=torch.bfloat16)
            nbytes = b * t * (k // 2 + k // 16) + b * k * 2 + b * t * (4 + 8) + b * t * 2
            floor = max(launch, nbytes / (bw * 1e3))
            it = itertools.cycle(inputs)

            def fused():
                x, values, idx = next(it)
                gathered_bias(x, w, values, idx, logits)

            times = {"gathered_bias": round(time_us(fused, graph=True), 2)}
            for tt, s, warps in GEOMETRIES:
                if tt > 2 * t or (k // 8) % s:
                    continue
                fn = _launcher(w, inputs, logits, tt, s, warps, not args.no_pdl)
                times[f"read_tt{tt}_s{s}_w{warps}"] = round(time_us(fn, graph=True), 2)
            if args.contig:  # consecutive rows from a random start: a gather without the scatter in DRAM
                contig = [(x, values, (torch.randint(0, V - b * t, (1,), device="cuda")
                                       + torch.arange(b * t, device="cuda")).view(b, t)) for x, values, _ in inputs]
                for tt, s, warps in GEOMETRIES:
                    if tt > 2 * t or (k // 8) % s:
                        continue
                    fn = _launcher(w, contig, logits, tt, s, warps, not args.no_pdl)
                    times[f"contig_tt{tt}_s{s}_w{warps}"] = round(time_us(fn, graph=True), 2)
            reads = {n: us for n, us in times.items() if n.startswith("read")}
            best = min(reads, key=reads.get)
            if args.contig:
                cont = {n: us for n, us in times.items() if n.startswith("contig")}
                times["best_contig"] = min(cont, key=cont.get)
                times["contig_x_floor"] = round(cont[times["best_contig"]] / floor, 3)
            emit_row(rows, {"case": f"K{k} B{b} T{t}", "bytes": nbytes, "floor_us": round(floor, 2),
                            "gathered_bias_us": times["gathered_bias"], "best_read": best, "best_read_us": reads[best],
                            "read_x_floor": round(reads[best] / floor, 3),
                            "gathered_x_floor": round(times["gathered_bias"] / floor, 3),
                            "gathered_x_read": round(times["gathered_bias"] / reads[best], 3), "times": times})
        del w
        torch.cuda.empty_cache()
    save_rows(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
