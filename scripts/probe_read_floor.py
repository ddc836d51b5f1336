"""How close can *any* kernel come to the byte floor of a decode GEMM? Time a pure streaming read
of the same bytes in the same layer-stack timer the GEMM targets use.

``fp8_gemm`` at M <= 64 is a weight stream: its byte floor is ``bytes / copy bandwidth``, where the
copy bandwidth is measured on 2 GiB. A kernel that only reads N*K bytes and does nothing with them
(no decode, no dot, no reduction across programs) shows what one launch, the first DRAM round trip
and the tail cost at that size, i.e. the best time reachable by a GEMM that reads those bytes.

Kernels (each program XOR-reduces what it read and writes one int32, so no load is dead):

* ``once``: one ``BLOCK``-word load a program, as many programs as it takes (the classic shape);
* ``loop``: ``progs`` programs, each a contiguous share read ``BLOCK`` words at a time through
  Triton's pipeliner (``num_stages`` loads in flight, cp.async into shared memory);
* ``torch.sum`` over the int32 view (PyTorch's reduction kernel);
* ``--pdl``: also every ``once`` variant as a programmatic dependent launch that waits for the
  previous kernel and lets the next one launch early (``_pdl``): in a layer stack the launch gap
  between kernels then overlaps the previous kernel (the GEMVs of ``fp8_gemm`` / ``fp4_gemm``
  and the gathered kernel launch this way).

    python3 scripts/probe_read_floor.py [--layers 8] [--pdl] [--json $OUT/read_floor.json]

Per shape: the floor, each variant's µs a layer, and the best read / floor. Needs CUDA.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from scripts.bench_rows import save_rows  # noqa: E402


@triton.jit
def _read_once_kernel(src, out, n_words, BLOCK: tl.constexpr, PDL: tl.constexpr = False):
    if PDL:  # nothing global before the wait; then the next PDL launch may start
        gdc_wait()
        gdc_launch_dependents()
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(src + offs, mask=offs < n_words, other=0)
    tl.store(out + tl.program_id(0), tl.xor_sum(x, axis=0))


@triton.jit
def _read_loop_kernel(src, out, n_words, words_per_prog, BLOCK: tl.constexpr, STAGES: tl.constexpr):
    start = tl.program_id(0).to(tl.int64) * words_per_prog
    acc = tl.zeros([BLOCK], dtype=tl.int32)
    for i in tl.range(0, words_per_prog, BLOCK, num_stages=STAGES):
        offs = start + i + tl.arange(0, BLOCK)
        acc ^= tl.load(src + offs, mask=offs < n_words, other=0)
    tl.store(out + tl.program_id(0), tl.xor_sum(acc, axis=0))


def _once(buf, out, block, warps, pdl=False):
    n = buf.numel()
    kw = {"PDL": True, "launch_pdl": True} if pdl else {}
    return lambda: _read_once_kernel[(triton.cdiv(n, block),)](buf, out, n, BLOCK=block, num_warps=warps, **kw)


def _loop(buf, out, block, warps, progs, stages):
    n = buf.numel()
    per = triton.cdiv(triton.cdiv(n, progs), block) * block
    grid = (triton.cdiv(n, per),)
    return lambda: _read_loop_kernel[grid](buf, out, n, per, BLOCK=block, STAGES=stages, num_warps=warps)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--json", default=None)
    ap.add_argument("--pdl", action="store_true", help="also the 'once' kernels as programmatic dependent launches")
    args = ap.parse_args()

    from lowbit._backend import sm_count
    from lowbit.bench.gemm import NK, stack_us
    from lowbit.bench.timing import copy_bandwidth_gbps

    bw = copy_bandwidth_gbps()
    sms = sm_count(torch.device("cuda"), 0)
    rows = [{"copy_gbps": round(bw, 1), "layers": args.layers, "sms": sms}]
    print(json.dumps(rows[0]), flush=True)
    shapes = [("fp8", n, k, n * k) for n, k in NK] + [("fp4", n, k, n * k // 2) for n, k in NK]
    for fmt, n, k, nbytes in shapes:
        bufs = [torch.randint(-2**31, 2**31 - 1, (nbytes // 4,), dtype=torch.int32, device="cuda")
                for _ in range(args.layers)]
        outs = [torch.empty(1 << 16, dtype=torch.int32, device="cuda") for _ in range(args.layers)]
        rec = {"fmt": fmt, "N": n, "K": k, "bytes": nbytes, "floor_us": round(nbytes / (bw * 1e3), 2)}
        variants = {}
        for block in (1024, 2048, 4096, 8192):
            for warps in (4, 8):
                variants[f"once_b{block}_w{warps}"] = [_once(b, o, block, warps) for b, o in zip(bufs, outs)]
                if args.pdl:
                    variants[f"once_b{block}_w{warps}_pdl"] = [_once(b, o, block, warps, True) for b, o in zip(bufs, outs)]
        for block in (1024, 2048):
            for progs_per_sm in (1, 2, 4):
                for stages in (3, 6):
                    variants[f"loop_b{block}_p{progs_per_sm}_s{stages}"] = [
                        _loop(b, o, block, 4, progs_per_sm * sms, stages) for b, o in zip(bufs, outs)]
        variants["torch_sum"] = [lambda b=b: b.sum() for b in bufs]
        times = {}
        for name, fns in variants.items():
            try:
                times[name] = round(stack_us(fns), 2)
            except Exception as e:  # noqa: BLE001 - a config that does not compile is reported, not fatal
                times[name] = f"error: {type(e).__name__}"
        numeric = {k_: v for k_, v in times.items() if isinstance(v, float)}
        best = min(numeric, key=numeric.get)
        rec.update({"best": best, "best_us": numeric[best], "best_x_floor": round(numeric[best] / rec["floor_us"], 3),
                    "x1.3_floor_us": round(1.3 * rec["floor_us"], 2), "times": times})
        rows.append(rec)
        print(json.dumps({k_: v for k_, v in rec.items() if k_ != "times"}), flush=True)
        del bufs, outs, variants
        torch.cuda.empty_cache()
    save_rows(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
