"""Tune the launch table of ``sparse_attn`` (``TUNED_CONFIGS`` in ``triton.py``) on a GPU:
``lowbit tune sparse_attn``.

Shapes (d = 512, n = 65536), one or more per (regime, FP8 KV) entry of the table: "small" (decode
with rows x ceil(h / 64) < 16: b = 1), "split" (b = 32 decode: the top-k list split by the cost
model) and "bulk" (b = 128 decode, prefill m = 4096). Candidates: BLOCK_H {16, 32, 64} x BLOCK_N
{32, 64} x num_stages {1, 2, 3} (4 warps at BLOCK_H 16, else 4 or 8), then, on the decode shapes,
explicit split counts and (``--combine``) the merge kernel's tile for the best three. Each
candidate is checked against the fp64 reference (relative error < 2e-2, the tests' tolerance),
then timed by CUDA-graph replay over rotating input copies as ``lowbit bench sparse_attn`` does
(prefill: without the graph). Prints the best per shape and the best common config per table
entry, in the table's syntax.
"""
from __future__ import annotations

import argparse
import itertools
import json
import math

from lowbit.ops._tuning import Log, cuda_missing, dump_json, rel_err

__all__ = ["main"]

TOL = 2e-2  # tests/ops/test_sparse_attn.py
D, N_CACHE = 512, 65536
# (regime, fp8 KV) -> shapes (m, b, h, topk)
SHAPES = {
    ("small", False): [(1, 1, 64, 2048), (1, 1, 64, 512), (1, 1, 128, 2048)],
    ("small", True): [(1, 1, 64, 2048)],
    ("split", False): [(1, 32, 128, 2048), (2, 32, 128, 512)],
    ("split", True): [(1, 32, 128, 2048)],
    ("bulk", False): [(1, 128, 128, 512), (4096, 1, 128, 2048)],
    ("bulk", True): [(1, 128, 128, 512)],
}
SPLITS = (4, 8, 16, 32, 64)
# the merge kernel's tile (COMBINE_H heads x COMBINE_D dims a program), tried with --combine
COMBINE_TILES = ((8, 128), (4, 128), (2, 128), (1, 128), (4, 64), (1, 64), (2, 256), (1, 512))


def candidates(h: int, quick: bool) -> list[dict]:
    block_hs = (16, 64) if quick else (16, 32, 64)
    out = []
    for bh, bn, st in itertools.product(block_hs, (64,) if quick else (32, 64), (1, 2) if quick else (1, 2, 3)):
        if bh > max(16, 1 << (h - 1).bit_length()):
            continue
        for w in ((4,) if bh == 16 else (8,) if quick else (4, 8)):
            out.append(dict(BLOCK_H=bh, BLOCK_N=bn, num_warps=w, num_stages=st))
    return out


def _key(cfg) -> str:
    return json.dumps(cfg, sort_keys=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="lowbit tune sparse_attn", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a few candidates, no split sweep")
    ap.add_argument("--regime", choices=("small", "split", "bulk"), default=None, help="only this regime")
    ap.add_argument("--combine", action="store_true", help="also sweep the merge kernel's tile")
    ap.add_argument("--rep", type=int, default=25, help="ms of graph replay per candidate")
    ap.add_argument("--json", default=None, help="write every timing here")
    args = ap.parse_args(argv)
    if cuda_missing("lowbit tune sparse_attn"):
        return 2
    import torch

    from lowbit.bench.timing import L2_BYTES, rotating, time_us
    from lowbit.formats.fp8 import FP8
    from lowbit.ops.sparse_attn import triton as sk
    from lowbit.ops.sparse_attn.reference import sparse_attn_reference

    log = Log()
    log(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    results = {}
    for (regime, fp8), shapes in SHAPES.items():
        if args.regime not in (None, regime):
            continue
        for m, b, h, topk in shapes:
            name = f"{regime} m{m} b{b} h{h} top{topk}" + (" fp8kv" if fp8 else "")
            scale = D**-0.5
            decode = m <= 2

            def make():
                q = torch.randn(b, m, h, D, device="cuda", dtype=torch.bfloat16)
                kv = torch.randn(b, N_CACHE, D, device="cuda", dtype=torch.bfloat16)
                kv_scale = None
                if fp8:
                    f = FP8.quantize(kv, "group", 64)
                    kv, kv_scale = f.data, f.scale
                idx = torch.randint(0, N_CACHE, (b, m, topk), device="cuda", dtype=torch.int32)
                idx[..., -topk // 16:] = -1  # as lowbit/bench/sparse_attn.py
                return q, kv, torch.randn(h, device="cuda"), idx, kv_scale

            copies = rotating(make, b * N_CACHE * D * (1 if fp8 else 2) + b * m * topk * 4,
                              min_total=4 * L2_BYTES) if decode else itertools.repeat(make())
            q0, kv0, sink0, idx0, ks0 = inp0 = next(copies)
            kv_ref = FP8(kv0, ks0, "group", 64).dequantize(torch.float64) if fp8 else kv0.double()
            ref = sparse_attn_reference(q0.double(), kv_ref, sink0.double(), idx0, scale)
            rows = results.setdefault(name, {})

            def run(cfg):
                try:
                    err = rel_err(sk.sparse_attn_triton(*inp0[:4], scale, ks0, config=cfg), ref)
                    if not err < TOL:
                        log(f"{name} {_key(cfg)}: INVALID (rel err {err:.1e})")
                        return None
                    call = lambda: sk.sparse_attn_triton(*next(copies)[:4], scale, ks0, config=cfg)  # noqa: E731
                    return time_us(call, graph=decode, rep=args.rep)
                except Exception as e:  # noqa: BLE001 - a config that does not compile is a result
                    log(f"{name} {_key(cfg)}: ERROR {type(e).__name__}: {str(e)[:160]}")
                    return None

            for cfg in candidates(h, args.quick):
                rows[_key(cfg)] = run(cfg)
            top = sorted((us, c) for c, us in rows.items() if us)[:3]
            if decode and not args.quick:
                for _, c in top:
                    tiles = math.ceil(topk / json.loads(c)["BLOCK_N"])
                    for s in SPLITS:
                        if s <= tiles:
                            cfg = dict(json.loads(c), SPLITS=s)
                            rows[_key(cfg)] = run(cfg)
            if decode and args.combine:
                for _, c in top:
                    for ch, cd in COMBINE_TILES:
                        cfg = dict(json.loads(c), COMBINE_H=ch, COMBINE_D=cd, COMBINE_WARPS=max(1, min(4, ch * cd // 128)))
                        rows[_key(cfg)] = run(cfg)
            for us, c in sorted((us, c) for c, us in rows.items() if us)[:6]:
                log(f"{name} {us:9.2f} us  {c}")
            copies = inp0 = q0 = kv0 = ref = kv_ref = None  # free them before the next shape's
            torch.cuda.empty_cache()
        # the best common config of the entry: the least sum over its shapes of time / best; an
        # explicit split count overrides the cost model, so the table keeps the configs without one
        names = [n for n in results if n.startswith(regime) and n.endswith("fp8kv") == fp8]
        score = {}
        for n in names:
            best = min((us for us in results[n].values() if us), default=None)
            for c, us in results[n].items():
                if us and best and "SPLITS" not in c:
                    score.setdefault(c, []).append(us / best)
        full = {c: sum(v) for c, v in score.items() if len(v) == len(names)}
        if full:
            c = min(full, key=full.get)
            print(f'    ("{regime}", {fp8}): dict({", ".join(f"{a}={v}" for a, v in json.loads(c).items())}),  '
                  f"# sum of time / best {full[c]:.3f}; table: {sk.TUNED_CONFIGS[(regime, fp8)]}")
    if args.json:
        dump_json(args.json, results)
        log("wrote", args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
