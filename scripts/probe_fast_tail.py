"""Where the draft head's fast argmax spends the time after (and before) its coarse pass, on the H200.

    PYTHONPATH=$PWD python3 scripts/probe_fast_tail.py [--ms 1,8,16] [--bits 2,4] [--json out.json]

On the 124160 x 5120 head (g64, block 128, kcand 8, rerank 32), CUDA-graph replay
(``lowbit.bench.timing.time_us``, back-to-back calls in one graph), per bits and M:

* ``argmax``: ``DraftHead.argmax`` end to end (x preparation, coarse pass, selection, rerank);
* ``coarse``: the coarse pass alone (x preparation + pass, ``coarse_head``);
* ``x_prep``: the x preparation alone (``x_int8_tiles``);
* ``select_rerank``: both launches after the pass alone, on its candidates;
* ``select`` / ``rerank``: each launch alone (the selection's bitonic kernel; the rerank on the
  selection's picks), launched as the fast path launches them (PDL, but first in their graph);
* ``argmax no PDL``: end to end with the selection and rerank as plain launches.

``tail = argmax - coarse`` is what the two launches after the pass cost in the chain; against
``select + rerank`` alone it shows how much of their launch latency the chain hides.
"""
from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from head_bench import RecordLog, random_head  # noqa: E402


def _launches(cand_key, cand_idx, x, weight, r: int, kcand: int):
    """(select(), rerank()) closures launching the fast path's two kernels as ``fast_select_rerank``
    does (``select.launch_select`` / ``launch_rerank``, k = 1) on fixed buffers."""
    import torch

    from lowbit.ops.coarse_head import select as sel

    m = cand_key.shape[0]
    dev = x.device
    picks = torch.empty(m, r, dtype=torch.int64, device=dev)
    vals = torch.empty(m, r, dtype=torch.float32, device=dev)
    out_v = torch.empty(m, 1, dtype=torch.float32, device=dev)
    out_i = torch.empty(m, 1, dtype=torch.int64, device=dev)

    def select():
        sel.launch_select(cand_key, cand_idx, picks, kcand, weight.shape[0])

    def rerank():
        sel.launch_rerank(x, weight, picks, vals, out_v, out_i)

    return select, rerank


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ms", default="1,8,16")
    ap.add_argument("--bits", default="2,4")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    import torch

    from lowbit import DraftHead
    from lowbit.bench.timing import copy_bandwidth_gbps, time_us
    from lowbit.ops.coarse_head import BOUND_NONE, coarse_head
    from lowbit.ops.coarse_head import fast_select_rerank
    from lowbit.ops.coarse_head import select as sel
    from lowbit.ops.coarse_head.x_int8 import x_int8_tiles

    log = RecordLog()
    bw = copy_bandwidth_gbps()
    w = random_head()
    for bits in [int(v) for v in args.bits.split(",")]:
        h = DraftHead(w, bits=bits, mode="fast")
        p = h._ensure_packed()
        floor = p.nbytes / (bw * 1e3)
        ell = p.fmt.packed.shape[1]
        for m in [int(v) for v in args.ms.split(",")]:
            x = torch.randn(m, w.shape[1], device="cuda", dtype=torch.bfloat16)
            h.argmax(x)
            out = coarse_head(x, p, block=128, kcand=h.kcand, bound=BOUND_NONE)
            nb = max(8, 1 << (m - 1).bit_length())
            select, rerank = _launches(out.cand_key, out.cand_idx, x, w, h.rerank, h.kcand)
            select()
            rerank()
            rec = {"bits": bits, "M": m, "floor_us": round(floor, 1)}
            rec["argmax"] = time_us(lambda: h.argmax(x), graph=True)
            rec["coarse"] = time_us(lambda: coarse_head(x, p, block=128, kcand=h.kcand, bound=BOUND_NONE), graph=True)
            rec["x_prep"] = time_us(lambda: x_int8_tiles(x, ell, 8 // bits, nb, perm=bits == 2, wide=True), graph=True)
            rec["select_rerank"] = time_us(
                lambda: fast_select_rerank(out.cand_key, out.cand_idx, x, w, h.rerank, 1, h.kcand), graph=True)
            rec["select"] = time_us(select, graph=True)
            rec["rerank"] = time_us(rerank, graph=True)
            sel.PDL = False
            try:
                rec["argmax no PDL"] = time_us(lambda: h.argmax(x), graph=True)
            finally:
                sel.PDL = True
            rec = {k: (round(v, 2) if isinstance(v, float) else v) for k, v in rec.items()}
            rec["tail"] = round(rec["argmax"] - rec["coarse"], 2)
            log(rec)
    log.save(args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
