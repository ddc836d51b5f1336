"""A/B of the certified head's fp32 band kernels (``lowbit/ops/coarse_head/triton.py``) under their
module switches, on the H200.

    python3 scripts/bench_band_kernels.py [--json $OUT/band.json] [--ms 16,32,64] [--rounds 3]

The band kernel is the coarse pass of the certified INT8 head past ``MMA_MAX_M_CERTIFIED`` rows
(so certified ``topk`` / ``logits`` from M = 16), of the statistical bound, and of native FP8 /
NVFP4 rows on the tensor-core path (M > 1). Variants (each sets switches, then restores them):

* ``shipped``: the library as it is.
* ``pipelined epilogue``: ``triton.EPILOGUE_STAGES = 0`` -- the epilogue's per-group loop
  software-pipelined at the launch's stage count, as before the thirty-sixth session (offline sm_90
  at K = 5120: 416-488 bytes of spills at BM = 32 / 64, 220 registers at BM = 16 against 141).
* ``nvfp4 bk64`` (NVFP4 rows only): ``triton.NVFP4_DOT_BK = 64``, as before the thirty-sixth
  session (offline: 255 registers and 40-376 bytes of spills, against none at 32).

Per (head, M, coarse configuration, variant): the coarse pass alone (``coarse_head``, CUDA-graph
replay, ``lowbit.bench.timing.time_us``; the variants interleaved over ``--rounds`` in alternating
order) and whether its logits match the shipped variant's (bit for bit where only the schedule
changed; to 1e-5 relative where the summation steps did). Then certified INT8 ``topk(16)`` of a
``DraftHead`` end to end under the epilogue variants, with cuBLAS bf16 ``F.linear`` +
``torch.topk`` in the same run. Heads: 124160 x 5120 and 49152 x 576 (random N(0, 0.02) rows;
the small head's coarse copy fits in L2, so its times are warm-L2 times).
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from head_bench import RecordLog, random_head  # noqa: E402

HEADS = ((124160, 5120), (49152, 576))
#: variant -> switches of lowbit.ops.coarse_head.triton
VARIANTS = {
    "shipped": {},
    "pipelined epilogue": {"EPILOGUE_STAGES": 0},
    "nvfp4 bk64": {"NVFP4_DOT_BK": 64},
}
#: coarse configuration -> (packing kind, bound name)
COARSE = {"int8 g64 det": ("int8", "det"), "int8 g64 stat": ("int8", "stat"),
          "fp8 rows det": ("fp8", "det"), "nvfp4 rows det": ("nvfp4", "det")}


def variants_for(kind: str) -> list[str]:
    """The variants that change something for a packing kind: the epilogue's per-group loop runs
    for INTx only, the step size switch is NVFP4's."""
    if kind == "int8":
        return ["shipped", "pipelined epilogue"]
    if kind == "nvfp4":
        return ["shipped", "nvfp4 bk64"]
    return ["shipped"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", default=None)
    ap.add_argument("--ms", default="16,32,64")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F

    import lowbit
    import lowbit.ops.coarse_head as ch
    from lowbit.bench.flags import module_flags
    from lowbit.bench.timing import interleaved_medians, time_us
    from lowbit.formats import FP8, NVFP4
    from lowbit.ops.coarse_head import triton as tr

    log = RecordLog()
    bounds = {"det": ch.BOUND_DET, "stat": ch.BOUND_STAT}
    ms = [int(v) for v in args.ms.split(",")]
    for n, k in HEADS:
        w = random_head(n, k)
        packings = {"int8": ch.pack(w, 8, 64), "fp8": ch.pack(FP8.quantize(w, "row"), None, 16),
                    "nvfp4": ch.pack(NVFP4.quantize(w), None, 16)}
        for m in ms:
            x = torch.randn(m, k, device=w.device, dtype=torch.bfloat16)
            for name, (kind, bound) in COARSE.items():
                packing = packings[kind]
                names = variants_for(kind)
                logits = {}

                def measure(v, packing=packing, bound=bound, logits=logits):
                    with module_flags(tr, VARIANTS[v]):
                        def call(write_logits=False):
                            return ch.coarse_head(x, packing, block=128, kcand=4, bound=bounds[bound],
                                                  write_logits=write_logits)
                        if v not in logits:
                            logits[v] = call(write_logits=True).logits
                        call()  # compiled before the graph capture
                        return {"us": time_us(call, graph=True)}

                recs = interleaved_medians(names, measure, args.rounds)
                for v in names:
                    rec = {"n": n, "k": k, "m": m, "coarse": name, "variant": v, **recs[v]}
                    if v != "shipped" and "shipped" in logits and v in logits:
                        a, b = logits["shipped"], logits[v]
                        rec["bit_identical"] = bool(torch.equal(a, b))
                        rec["rel_diff"] = float((a - b).abs().max() / a.abs().max().clamp_min(1e-30))
                        if "us" in recs["shipped"] and "us" in rec:
                            rec["vs_shipped"] = rec["us"] / recs["shipped"]["us"]
                    log(rec)
            # certified INT8 topk(16) end to end (DraftHead: the band kernel from M = 16), cuBLAS in the same run
            head = lowbit.DraftHead(w, bits=8, group_size=64, mode="certified")
            head.warmup(m)
            names = ["shipped", "pipelined epilogue"]

            def measure_head(v, head=head, x=x):
                with module_flags(tr, VARIANTS[v]):
                    return {"us": time_us(lambda: head.topk(x, 16), graph=True)}

            recs = interleaved_medians(names, measure_head, args.rounds)
            cublas = time_us(lambda: torch.topk(F.linear(x, w).float(), 16, dim=-1), graph=True)
            for v in names:
                rec = {"n": n, "k": k, "m": m, "coarse": "DraftHead certified int8 topk16", "variant": v,
                       **recs[v], "cublas_topk_us": cublas}
                if "us" in rec:
                    rec["speedup_vs_cublas"] = cublas / rec["us"]
                    if v != "shipped" and "us" in recs["shipped"]:
                        rec["vs_shipped"] = rec["us"] / recs["shipped"]["us"]
                log(rec)
            del head
        w = packings = None  # freed before the next head
        torch.cuda.empty_cache()
    log.save(args.json)
    print(summary(log.rows))
    return 0


def summary(rows: list[dict]) -> str:
    """One line per (head, M, configuration): the shipped µs and each other variant's µs and ratio
    (and cuBLAS's for the end-to-end rows), for reading the result off the device's output tail."""
    lines = ["head            M  configuration                    shipped us  variant: us (x shipped)"]
    groups: dict = {}
    for r in rows:
        groups.setdefault((r["n"], r["k"], r["m"], r["coarse"]), []).append(r)
    for (n, k, m, coarse), recs in groups.items():
        base = next((r for r in recs if r["variant"] == "shipped"), {})
        others = [f"{r['variant']}: " + (f"{r['us']:.1f} ({r.get('vs_shipped', 0):.3f}x)" if "us" in r else r.get("error", "?"))
                  for r in recs if r["variant"] != "shipped"]
        extra = f"  cuBLAS {base['cublas_topk_us']:.1f}" if "cublas_topk_us" in base else ""
        shipped = f"{base['us']:10.1f}" if "us" in base else f"{base.get('error', '?')[:10]:>10}"
        lines.append(f"{n:>6} x {k:<5} {m:>3}  {coarse:<32} {shipped}  " + "; ".join(others) + extra)
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
