"""Do two draft heads' sync-free kernels race when they run on two CUDA streams at once?

    PYTHONPATH=$PWD python3 scripts/probe_stream_race.py [--iters 300] [--json out.json]

The fast path's rerank (``select._counter``) and the certified kernels (``certified._scratch``,
``fused_argmax._scratch``) keep one zero-filled ticket / counter buffer per device, which every
call leaves at zero (``coarse_head/_state.py``). Two calls that overlap on different streams of
one device share it. Here two heads (fast INT4 and certified INT8 on a 49152 x 576 head, M = 4 and
16) are called back to back on two streams without synchronizing, ``--iters`` times each, and
every result is compared with the same call made alone; the report counts the calls that differ
(and whether the counters were left at zero). Eager calls: in one CUDA graph the launches are
serialized on the graph's stream.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from head_bench import random_head  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iters", type=int, default=300)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    import torch

    from lowbit import DraftHead
    from lowbit.ops.coarse_head import select as sel

    torch.manual_seed(0)
    w = random_head(49152, 576)
    report = []
    for mode, bits in (("fast", 4), ("certified", 8)):
        head = DraftHead(w, bits=bits, mode=mode)
        xs = [torch.randn(m, 576, device="cuda", dtype=torch.bfloat16) for m in (4, 16)]
        alone = [head.argmax(x) for x in xs]
        torch.cuda.synchronize()
        streams = [torch.cuda.Stream() for _ in xs]
        outs = [[None] * args.iters for _ in xs]
        for x in xs:
            for s in streams:
                x.record_stream(s)
        for s in streams:
            s.wait_stream(torch.cuda.current_stream())
        for it in range(args.iters):
            for j, (s, x) in enumerate(zip(streams, xs)):
                with torch.cuda.stream(s):
                    outs[j][it] = head.argmax(x)
        torch.cuda.synchronize()
        wrong = [sum(int(not torch.equal(o, a)) for o in out) for out, a in zip(outs, alone)]
        counters_zero = bool((sel._counter(w.device, 16) == 0).all()) if mode == "fast" else None
        rec = {"mode": mode, "bits": bits, "iters": args.iters, "wrong_calls_m4": wrong[0], "wrong_calls_m16": wrong[1],
               "rerank_counters_zero": counters_zero}
        print(json.dumps(rec), flush=True)
        report.append(rec)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
