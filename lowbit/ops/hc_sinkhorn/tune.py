"""Tune the hc = 4 launch config of ``hc_split_sinkhorn`` (``HC4_CONFIG`` in ``triton.py``) on a GPU:
``lowbit tune hc_sinkhorn``.

Shape: 16384 (b, s) rows, hc = 4, 20 Sinkhorn iterations, eps = 1e-6 (``lowbit bench``'s case).
Every (BLOCK_R rows a program, num_warps) candidate is checked against the fp64 reference on the
timed inputs and on a stress input (logits x 8: near-one-hot softmax rows, slow Sinkhorn; max
absolute error < 2e-5, the tests' tolerance), then timed by CUDA-graph replay over rotating input
copies (as ``lowbit bench hc_split_sinkhorn``), next to the one-pass floor (bytes / the measured
copy bandwidth). The best three and the table's config are re-timed (median of four) and the best
is printed as the table line.
"""
from __future__ import annotations

import argparse
import statistics

from lowbit.ops._tuning import Log, cuda_missing, dump_json

__all__ = ["main"]

ROWS, HC, ITERS, EPS = 16384, 4, 20, 1e-6
WIDTH = (2 + HC) * HC
TOL = 2e-5  # tests/ops/test_hc_sinkhorn.py
# one row a lane (BLOCK_R = 32 x warps), two, or half the lanes idle; a few rows a lane leave most
# of the GPU idle
LAUNCH = [(32, 1), (64, 1), (64, 2), (128, 2), (128, 4), (256, 4), (256, 8), (512, 8)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="lowbit tune hc_sinkhorn", description=__doc__.split("\n\n")[0])
    ap.add_argument("--cold", action="store_true", help="rotate > 4x L2 of input copies (L2-cold inputs)")
    ap.add_argument("--json", default=None, help="write every timing here")
    args = ap.parse_args(argv)
    if cuda_missing("lowbit tune hc_sinkhorn"):
        return 2
    import torch

    from lowbit.bench.timing import L2_BYTES, copy_bandwidth_gbps, rotating, time_us
    from lowbit.ops.hc_sinkhorn.reference import hc_split_sinkhorn_reference
    from lowbit.ops.hc_sinkhorn.triton import HC4_CONFIG, hc_split_sinkhorn_triton

    log = Log()

    def make(scale=1.0):
        return (torch.randn(1, ROWS, WIDTH, device="cuda") * scale, torch.rand(3, device="cuda") + 0.5,
                torch.randn(WIDTH, device="cuda") * 0.5)

    def call(inp, cfg):
        return hc_split_sinkhorn_triton(*inp, HC, ITERS, EPS, config=cfg)

    def max_err(out, ref):
        err = max((a.double() - r).abs().max().item() for a, r in zip(out, ref))
        return err if err == err else float("inf")

    in_bytes = ROWS * WIDTH * 4
    copies = rotating(make, in_bytes, min_total=4 * L2_BYTES, max_copies=1 << 10) if args.cold else rotating(make, in_bytes)
    inp = next(copies)
    ref = hc_split_sinkhorn_reference(*[t.double() for t in inp], HC, ITERS, EPS)
    stress = make(8.0)
    stress_ref = hc_split_sinkhorn_reference(*[t.double() for t in stress], HC, ITERS, EPS)
    nbytes = ROWS * (WIDTH + HC + HC + HC * HC) * 4  # mixes in; pre, post, comb out
    floor_us = nbytes / (copy_bandwidth_gbps() * 1e3)
    log(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; one pass over {nbytes / 1e6:.2f} MB = {floor_us:.2f} us")
    rows = {}
    table = (HC4_CONFIG["BLOCK_R"], HC4_CONFIG["num_warps"])
    for br, w in dict.fromkeys([table] + LAUNCH):
        cfg = dict(BLOCK_R=br, num_warps=w)
        try:
            err = max(max_err(call(inp, cfg), ref), max_err(call(stress, cfg), stress_ref))
            if not err < TOL:
                log(f"BLOCK_R {br:3d} w{w}: INVALID (max err {err:.1e})")
                continue
            rows[(br, w)] = [time_us(lambda: call(next(copies), cfg), graph=True)]
            log(f"BLOCK_R {br:3d} w{w}: {rows[(br, w)][0]:6.2f} us = {rows[(br, w)][0] / floor_us:.2f}x the floor")
        except Exception as e:  # noqa: BLE001 - a config that does not compile is a result
            log(f"BLOCK_R {br:3d} w{w}: ERROR {type(e).__name__}: {str(e)[:160]}")
    final = sorted(rows, key=lambda c: rows[c][0])[:3]
    if table in rows and table not in final:
        final.append(table)
    for c in final:
        cfg = dict(BLOCK_R=c[0], num_warps=c[1])
        rows[c] += [time_us(lambda: call(next(copies), cfg), graph=True) for _ in range(3)]
    med = {c: statistics.median(rows[c]) for c in final}
    for c in sorted(med, key=med.get):
        log(f"final BLOCK_R {c[0]:3d} w{c[1]}: {med[c]:6.2f} us (median of {len(rows[c])})")
    if med:
        best = min(med, key=med.get)
        print(f"HC4_CONFIG = dict(BLOCK_R={best[0]}, num_warps={best[1]})  # {med[best]:.2f} us; table {table}: "
              f"{med.get(table, float('nan')):.2f} us")
    if args.json:
        dump_json(args.json, dict(floor_us=floor_us, rows={f"{c[0]}/{c[1]}": v for c, v in rows.items()},
                                  device=torch.cuda.get_device_name()))
        log("wrote", args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
