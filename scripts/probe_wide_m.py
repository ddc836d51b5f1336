"""Probe (H200): where the draft head's coarse pass loses to cuBLAS at M = 16..64 on a short-K
head (SmolLM2's 49152 x 576), and how fast a plain ``tl.dot`` pass with the cheapest possible
epilogue (one packed-key max per row, one int64 ``atomic_max``) can be.

    python3 scripts/probe_wide_m.py .realhead/smollm2_head.pt.xz [--json $OUT/probe.json] [--ms 16,32,64] [--fused]
        [--pick $OUT/fused_configs.json]

Timed under CUDA-graph replay with L2 flushed (``head_bench.cold_graph_us``), per M:

* the head's certified coarse pass (band kernels) with kcand 4 (the default) and 1, and the
  fast one (no bound) — the epilogue's share;
* probe kernel ``dense``: the bf16 weight itself through ``tl.dot``, per-block best (value,
  token) as one int64 key, ``atomic_max`` per row (an exact-input argmax: no logits written);
* probe kernel ``int8``: the INT8 g64 codes decoded to ``q - z`` (exact in bf16), ``tl.dot``,
  group scale on the fp32 accumulator, the same epilogue (the coarse argmax only: no bound);
* both with the logits written instead of the key (the epilogue's cost);
* cuBLAS ``F.linear`` and ``F.linear + argmax``.

Probe kernels sweep (BN, num_warps, num_stages). Not library code: the winner, if any, moves
into ``lowbit/ops/coarse_head``. ``--fused`` times instead the library's fused certified argmax
(``lowbit/ops/coarse_head/fused_argmax.py``) under each launch configuration of its M band
(``FUSED_SWEEP``: BM, warps, stages, maxnreg, BN, BK, answer rows, epilogue cuts; a BM below the band is the
band's rows in M tiles side by side), next to cuBLAS (the ninth session's calls e / g A/B'd the
per-row atomics' semantics and the bound per token instead). ``--pick`` writes the fastest exact
configuration per band for ``scripts/bench_certified_real.py --fused-configs``.
"""
from __future__ import annotations

import argparse
import os
import sys

import torch
import triton
import triton.language as tl

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
BATCHES = 8

from lowbit.ops.coarse_head.certified import _pack  # noqa: E402  (the (value desc, token asc) key)

#: --fused: launch configurations tried per M band besides the library's, as
#: ((BM, num_warps, num_stages, maxnreg, BN), BK, ANSWER_ROWS, PROBE_CUT); a BM below the band
#: splits the rows into M tiles that run side by side in the grid (the second read of a block hits
#: L2); PROBE_CUT > 0 times the kernel with parts of its epilogue cut (wrong answers: where the
#: time goes). Tenth session, call a: tiles, BN 64, BK 32 / 128 and ||x|| from a first launch
#: (2-5 µs slower everywhere: removed) swept; best at band 64 BM 32 x 2 (44.1 vs 46.2 µs).
#: Call b: cuts 3 / 4 leave no result, so the compiler drops the coarse pass with them (~5 µs:
#: meaningless); cut 1 showed the last program's answers costing 7-14 µs (eight acq_rel atomics,
#: each a GPU-wide fence, now relaxed), and maxnreg 64 at BM 32 / 2 stages ran band 64 in 39.7 µs.
FUSED_SWEEP = {
    16: [((16, 4, 3, 64, 128), 64, 16, 0), ((16, 4, 2, None, 128), 64, 16, 0), ((16, 4, 3, None, 128), 64, 16, 1)],
    32: [((32, 4, 3, 64, 128), 64, 32, 0), ((32, 4, 2, None, 128), 64, 32, 0), ((32, 4, 2, 64, 128), 64, 32, 0),
         ((32, 4, 3, None, 128), 64, 32, 1)],
    64: [((32, 4, s, r, 128), 64, 32, 0) for s in (2, 3) for r in (None, 64, 72)]
        + [((64, 8, 2, 80, 128), 64, 32, 0), ((64, 8, 3, 72, 128), 64, 32, 0),
           ((32, 4, 2, 64, 128), 64, 32, 1), ((64, 8, 3, 80, 128), 64, 32, 1)],
}


@triton.jit
def _probe_kernel(x_ptr, w_ptr, s_ptr, z_ptr, key_ptr, lg_ptr, M, N, stride_xm, stride_wn, stride_sn,
                  K: tl.constexpr, G: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                  INT8: tl.constexpr, LOGITS: tl.constexpr):
    i_n = tl.program_id(0).to(tl.int64)
    o_n = i_n * BN + tl.arange(0, BN)
    o_m = tl.arange(0, BM)
    o_k = tl.arange(0, BK)
    m_n = o_n < N
    m_m = o_m < M
    acc = tl.zeros([BN, BM], dtype=tl.float32)
    for k0 in range(0, K, BK):
        b_w = tl.load(w_ptr + o_n[:, None] * stride_wn + k0 + o_k[None, :], mask=m_n[:, None], other=0)
        b_xt = tl.load(x_ptr + o_m[None, :] * stride_xm + k0 + o_k[:, None], mask=m_m[None, :], other=0.0)
        if INT8:
            grp = k0 // G
            zf = tl.load(z_ptr + o_n * stride_sn + grp, mask=m_n, other=0).to(tl.float32) + 8388608.0
            sc = tl.load(s_ptr + o_n * stride_sn + grp, mask=m_n, other=0.0).to(tl.float32)
            # 2^23 + q exactly, minus 2^23 + z: q - z, an integer of at most 8 bits (exact in bf16)
            wq = ((b_w.to(tl.int32) | 0x4B000000).to(tl.float32, bitcast=True) - zf[:, None]).to(tl.bfloat16)
            acc += tl.dot(wq, b_xt) * sc[:, None]
        else:
            acc = tl.dot(b_w, b_xt, acc)
    if LOGITS:
        tl.store(lg_ptr + o_m[None, :] * N + o_n[:, None], acc, mask=m_m[None, :] & m_n[:, None])
    else:
        keys = tl.where(m_n[:, None], _pack(acc, o_n[:, None]), -(2**63))
        tl.atomic_max(key_ptr + o_m, tl.max(keys, axis=0), mask=m_m)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("data")
    ap.add_argument("--json", default=None)
    ap.add_argument("--ms", default="16,32,64")
    ap.add_argument("--fused", action="store_true")
    ap.add_argument("--pick", default=None, help="--fused: write the fastest exact launch configuration "
                    "per M band (BK and ANSWER_ROWS as the library's) as JSON here")
    args = ap.parse_args()
    import torch.nn.functional as F

    import lowbit.ops.coarse_head as ch
    from lowbit import DraftHead
    from head_bench import RecordLog, cold_graph_us
    from real_head_data import load

    blob = load(args.data)
    w = blob["weight"].cuda()
    hidden = blob["hidden"].cuda()
    n, k = w.shape
    log = RecordLog()
    head = DraftHead(w, mode="certified", bits=8, group_size=64)
    head.warmup(max_m=64, ks=(1,))
    pk = head.packing
    codes, scale, zero = pk.fmt.packed, pk.fmt.scale, pk.fmt.zero
    log({"weight": [n, k], "codes": list(codes.shape), "scale": list(scale.shape)})

    def coarse(bound, kcand):
        def run(x):
            old = ch.MMA_MAX_M_CERTIFIED
            ch.MMA_MAX_M_CERTIFIED = 0
            try:
                return ch.coarse_head(x, pk, block=head.block, kcand=kcand, bound=bound)
            finally:
                ch.MMA_MAX_M_CERTIFIED = old
        return run

    def probe(int8, logits, bn, warps, stages):
        def run(x):
            m = x.shape[0]
            bm = max(16, triton.next_power_of_2(m))
            key = torch.full((m,), -(2**63), dtype=torch.int64, device=x.device)
            lg = torch.empty(m if logits else 1, n, dtype=torch.float32, device=x.device)
            src = codes if int8 else w
            _probe_kernel[(triton.cdiv(n, bn),)](x, src, scale, zero, key, lg, m, n, x.stride(0), src.stride(0),
                                                 scale.stride(0), K=k, G=64, BM=bm, BN=bn, BK=64, INT8=int8,
                                                 LOGITS=logits, num_warps=warps, num_stages=stages)
            return lg if logits else key
        return run

    picked = {}  # --fused: M band -> (fastest exact config, µs, M)
    for m in [int(v) for v in args.ms.split(",")]:
        starts = torch.linspace(0, hidden.shape[0] - m, BATCHES).long().tolist()
        xs = [hidden[s:s + m].contiguous() for s in starts]
        # correctness of the probe kernels (argmax of the dense kernel vs torch on fp32)
        ref = (xs[0].float() @ w.float().T).argmax(-1)
        got = 2147483647 - (probe(False, False, 128, 4, 3)(xs[0]) & 0xFFFFFFFF)
        lg8 = probe(True, True, 128, 4, 3)(xs[0])
        ref8 = xs[0].float() @ pk.dense()[:n].T
        log({"M": m, "dense probe argmax agreement": float((got == ref).float().mean()),
             "int8 probe logits max abs err": float((lg8 - ref8).abs().max())})
        if args.fused:
            from lowbit.ops.coarse_head import fused_argmax as fa

            exact = {}  # stage name -> its (BM, warps, stages, maxnreg, BN), for --pick

            band = min(fa.MAX_BM, max(16, triton.next_power_of_2(m)))
            stats = ch.new_certified_stats(w.device)
            norms = ch.row_norms(w)
            stages = {"cuBLAS F.linear + argmax": lambda x: F.linear(x, w).argmax(-1),
                      "probe dense BN128 w4 s3 key": probe(False, False, 128, 4, 3),
                      "probe dense BN128 w8 s3 key": probe(False, False, 128, 8, 3)}
            cfgs = [(fa._CONFIGS[band], fa.BK, fa.ANSWER_ROWS, 0)] + FUSED_SWEEP.get(band, [])
            for cfg, bk, rows, cut in dict.fromkeys(cfgs):
                def run(x, cfg=cfg, bk=bk, rows=rows, cut=cut):
                    old = fa._CONFIGS[band], fa.BK, fa.ANSWER_ROWS, fa.PROBE_CUT
                    fa._CONFIGS[band], fa.BK, fa.ANSWER_ROWS, fa.PROBE_CUT = cfg, bk, rows, cut
                    try:
                        return fa.fused_argmax(x, w, norms, 128, stats)
                    finally:
                        fa._CONFIGS[band], fa.BK, fa.ANSWER_ROWS, fa.PROBE_CUT = old
                name = (f"fused argmax BM{cfg[0]} BN{cfg[4]} BK{bk} w{cfg[1]} s{cfg[2]} maxnreg {cfg[3]} rows {rows}"
                        + (f" CUT {cut}" if cut else ""))
                try:
                    got = run(xs[0])
                except Exception as e:  # a config that does not compile: say so, go on
                    log({"M": m, "stage": name, "graph_us": f"failed: {type(e).__name__}: {str(e)[:120]}"})
                    continue
                if cut:  # measurement only: no answers to check
                    stages[name] = run
                    continue
                agree = float((got == (xs[0].double() @ w.double().T).argmax(-1)).float().mean())
                log({"M": m, "fused config": name, "argmax agreement vs fp64": agree})
                if agree == 1.0 and bk == fa.BK and rows == fa.ANSWER_ROWS:
                    exact[name] = list(cfg)
                stages[name] = run
            for name, fn in stages.items():
                us = round(cold_graph_us(fn, xs), 1)
                log({"M": m, "stage": name, "graph_us": us})
                cfg = exact.get(name)
                if cfg is not None and (band not in picked or (m, -us) > (picked[band][2], -picked[band][1])):
                    picked[band] = (cfg, us, m)  # the fastest at the band's largest M probed
            continue
        stages = {
            "coarse certified band kcand4": coarse(ch.BOUND_DET, 4),
            "coarse certified band kcand1": coarse(ch.BOUND_DET, 1),
            "coarse fast band kcand4": coarse(ch.BOUND_NONE, 4),
            "coarse fast band kcand1": coarse(ch.BOUND_NONE, 1),
            "cuBLAS F.linear": lambda x: F.linear(x, w),
            "cuBLAS F.linear + argmax": lambda x: F.linear(x, w).argmax(-1),
        }
        for int8 in (False, True):
            for bn, warps, st in ((128, 4, 2), (128, 4, 3), (128, 8, 3), (64, 4, 3), (64, 4, 4), (256, 8, 3)):
                tag = f"probe {'int8' if int8 else 'dense'} BN{bn} w{warps} s{st}"
                stages[tag + " key"] = probe(int8, False, bn, warps, st)
                if (bn, warps, st) == (128, 4, 3):
                    stages[tag + " logits"] = probe(int8, True, bn, warps, st)
        for name, fn in stages.items():
            try:
                us = round(cold_graph_us(fn, xs), 1)
            except Exception as e:  # a config that does not compile: say so, go on
                us = f"failed: {type(e).__name__}: {str(e)[:120]}"
            log({"M": m, "stage": name, "graph_us": us})
    log.save(args.json)
    if args.pick:
        import json

        with open(args.pick, "w") as f:  # the band's fastest at the largest M probed in it
            json.dump({str(b): {"config": c, "graph_us": us, "M": m} for b, (c, us, m) in picked.items()}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
