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
* ``argmax no PDL``: end to end with the selection and rerank as plain launches;
* ``coarse cached x`` / ``argmax cached x``: the coarse pass / end to end with x prepared once
  outside the timed graph (``x_int8_tiles`` answered from a cache), so ``coarse - coarse cached x``
  is what the x preparation costs the chain -- the most that folding it into the coarse kernel
  could save;
* ``pass kcand 8`` / ``pass kcand 0``: the int8-wgmma pass launched directly (x preparation
  included) with the head's 8 candidates a block, and with none -- no candidate epilogue at all (its
  code is dead then), so the difference is what the epilogue costs the pass.

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


def _direct_pass(x, p, kcand: int):
    """The int8-wgmma coarse pass on the packing ``p`` launched as the fast path's dispatch does
    (its operands, ``_coarse_head_impl``), but with ``kcand`` candidates a block (0: no candidate
    epilogue, which ``coarse_head`` itself does not accept)."""
    from lowbit.ops.coarse_head import BOUND_NONE, _coarse_head_impl, _raw, _wgmma_operands

    w, _, _, gs = _raw(p)
    s, z = _wgmma_operands(p)
    return _coarse_head_impl(x, w, s, z, gs, p.kind, p.bits, p.group_size, p.n, p.padded_k, 128, kcand,
                             BOUND_NONE, 0.0, False)


class _CachedXPrep:
    """``x_int8.x_int8_tiles`` answered from a cache while active (the coarse pass imports it at
    call time): the first call per (x, arguments) computes, later ones return the same tensors."""

    def __init__(self):
        from lowbit.ops.coarse_head import x_int8

        self.module, self.real, self.cache = x_int8, x_int8.x_int8_tiles, {}

    def __call__(self, x, *args, trigger=False, **kw):
        key = (x.data_ptr(), tuple(x.shape), args, tuple(sorted(kw.items())))
        if key not in self.cache:
            self.cache[key] = self.real(x, *args, **kw)
        return self.cache[key]

    def __enter__(self):
        self.module.x_int8_tiles = self
        return self

    def __exit__(self, *exc):
        self.module.x_int8_tiles = self.real
        return False


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
            with _CachedXPrep():
                h.argmax(x)  # fills the cache outside the timed graph
                coarse_head(x, p, block=128, kcand=h.kcand, bound=BOUND_NONE)
                rec["coarse cached x"] = time_us(lambda: coarse_head(x, p, block=128, kcand=h.kcand,
                                                                     bound=BOUND_NONE), graph=True)
                rec["argmax cached x"] = time_us(lambda: h.argmax(x), graph=True)
            try:
                for kc in (h.kcand, 0):
                    rec[f"pass kcand {kc}"] = time_us(lambda: _direct_pass(x, p, kc), graph=True)
            except Exception as e:  # noqa: BLE001 -- a probe: record and go on
                rec["pass error"] = f"{type(e).__name__}: {e}"[:200]
            rec = {k: (round(v, 2) if isinstance(v, float) else v) for k, v in rec.items()}
            rec["tail"] = round(rec["argmax"] - rec["coarse"], 2)
            rec["x prep in chain"] = round(rec["coarse"] - rec["coarse cached x"], 2)
            if "pass kcand 0" in rec:
                rec["epilogue in pass"] = round(rec["pass kcand 8"] - rec["pass kcand 0"], 2)
            log(rec)
    log.save(args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
