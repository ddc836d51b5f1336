"""Tune the launch tables of ``gathered_bias`` (NVFP4) on a GPU: ``lowbit tune gathered``.

Two tables: ``cuda_core.DOT_CONFIGS`` (the CUDA-core kernel, by B*T: BT indices a program, TILE
units a K tile, warps, stages) and ``mma_nvfp4.pick_config`` (the tensor-core kernel: RT row tiles
a program, W warps). On the benchmark's shapes (V = 131072, NVFP4 weights, bf16 x) every
candidate is pinned through ``dispatch.gathered_bias(..., config=...)``, its scattered logits
checked against the table's CUDA-core row, and timed by CUDA-graph replay over rotating input
copies (``lowbit.bench.timing.time_us``, as ``lowbit bench gathered_bias``). Prints the best
candidates per shape, the best common config per ``DOT_CONFIGS`` row, and the MMA geometry each
shape prefers next to ``pick_config``'s.
"""
from __future__ import annotations

import argparse
import itertools
import json

from lowbit.ops._tuning import Log, cuda_missing, dump_json

__all__ = ["main"]

V = 131072
# (K, B, T) in priority order; the DOT_CONFIGS row each stands for: B*T <= 256, <= 4096, more
SHAPES = [(256, 1, 8), (1024, 16, 32), (1024, 64, 64), (4096, 16, 64), (4096, 256, 64)]
ROWS = {256: [(256, 1, 8)], 4096: [(1024, 16, 32), (1024, 64, 64), (4096, 16, 64)], 1 << 62: [(4096, 256, 64)]}


def dot_candidates(quick: bool) -> list[dict]:
    if quick:
        return [dict(BT=bt, TILE=tile, num_warps=4, num_stages=2) for bt, tile in ((2, 1024), (4, 1024), (4, 512))]
    return [dict(BT=bt, TILE=tile, num_warps=w, num_stages=st)
            for bt, tile, (w, st) in itertools.product((1, 2, 4, 8, 16), (256, 512, 1024), ((2, 2), (4, 2), (4, 3), (8, 2)))]


def mma_candidates(quick: bool) -> list[tuple[int, int]]:
    return [(1, 4), (1, 8)] if quick else [(rt, w) for rt in (1, 2) for w in (1, 2, 4, 8)]


def _key(cfg) -> str:
    return json.dumps(cfg, sort_keys=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="lowbit tune gathered", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a few candidates")
    ap.add_argument("--no-mma", action="store_true", help="only the CUDA-core table")
    ap.add_argument("--rep", type=int, default=15, help="ms of graph replay per candidate")
    ap.add_argument("--json", default=None, help="write every timing here")
    args = ap.parse_args(argv)
    if cuda_missing("lowbit tune gathered"):
        return 2
    import torch

    from lowbit.bench.timing import time_us
    from lowbit.formats import NVFP4
    from lowbit.ops.gathered import cuda_core, dispatch, mma_nvfp4, unpack_weight

    log = Log()
    log(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    results = {"dot": {}, "mma": {}}
    for k, b, t in SHAPES:
        shape = f"K{k} B{b} T{t}"
        w = NVFP4.quantize(torch.randn(V, k, device="cuda") * 0.02)
        fmt, data, scale, aux, _, kk, bits, gs = unpack_weight(w)

        def inputs():
            x = torch.randn(b, k, device="cuda", dtype=torch.bfloat16)
            idx = torch.rand(b, V, device="cuda").topk(t, dim=1).indices  # distinct in a row
            return x, torch.randn(b, t, device="cuda"), idx, torch.full((b, V), float("-inf"), device="cuda",
                                                                          dtype=torch.bfloat16)

        copies = [inputs() for _ in range(4)]

        def call(inp, cfg):
            x, values, idx, logits = inp
            dispatch.gathered_bias(x, fmt, data, scale, aux, values, idx, logits, 1.0, kk, bits, gs, config=cfg)
            return logits

        x0, v0, i0, l0 = copies[0]
        base = call((x0, v0, i0, l0.clone()), cuda_core.dot_config(b, t)).gather(1, i0).float()
        for kind, cands in (("dot", dot_candidates(args.quick)),
                            ("mma", [] if args.no_mma else [{"MMA": c} for c in mma_candidates(args.quick)])):
            rows = results[kind].setdefault(shape, {})
            for cfg in cands:
                try:
                    got = call((x0, v0, i0, l0.clone()), cfg).gather(1, i0).float()
                    if not torch.allclose(got, base, rtol=1e-2, atol=6.25e-2):
                        rows[_key(cfg)] = None
                        log(f"{shape} {kind} {_key(cfg)}: MISMATCH")
                        continue
                    it = itertools.cycle(copies)
                    rows[_key(cfg)] = time_us(lambda: call(next(it), cfg), graph=True, rep=args.rep)
                except Exception as e:  # noqa: BLE001 - a config that does not compile is a result
                    rows[_key(cfg)] = None
                    log(f"{shape} {kind} {_key(cfg)}: ERROR {type(e).__name__}: {str(e)[:160]}")
            ok = sorted((us, c) for c, us in rows.items() if us)
            for us, c in ok[:5]:
                log(f"{shape} {kind} {us:8.2f} us  {c}")
        w = data = scale = copies = None  # free the weight before the next shape's
        torch.cuda.empty_cache()
    # the best common CUDA-core config per table row: the least sum over its shapes of time / best
    for max_bt, shapes in ROWS.items():
        tables = [results["dot"].get(f"K{k} B{b} T{t}", {}) for k, b, t in shapes]
        tables = [tb for tb in tables if any(tb.values())]
        if not tables:
            continue
        score = {}
        for tb in tables:
            best = min(us for us in tb.values() if us)
            for c, us in tb.items():
                if us:
                    score.setdefault(c, []).append(us / best)
        full = {c: sum(v) for c, v in score.items() if len(v) == len(tables)}
        if full:
            c = min(full, key=full.get)
            print(f"    ({max_bt}, dict({', '.join(f'{a}={v}' for a, v in json.loads(c).items())})),  "
                  f"# sum of time / best {full[c]:.3f} over {len(tables)} shapes")
    for shape, rows in results["mma"].items():
        ok = sorted((us, c) for c, us in rows.items() if us)
        if ok:
            k, b, t = (int(p[1:]) for p in shape.split())
            log(f"{shape} MMA best {json.loads(ok[0][1])['MMA']} {ok[0][0]:.2f} us; pick_config "
                f"{mma_nvfp4.pick_config(b, t, k)} {rows.get(_key({'MMA': list(mma_nvfp4.pick_config(b, t, k))}))}")
    if args.json:
        dump_json(args.json, results)
        log("wrote", args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
