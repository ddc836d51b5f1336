"""Where an eager draft-head call spends its host time (H200): cProfile of repeated argmax calls.

    python3 scripts/profile_head_eager.py [DATA.pt.xz] [--calls 200] [--m 1]

DATA from ``scripts/real_head_data.py`` (else a random 49152 x 576 bf16 head). Per head
(certified INT8 g64, fast INT4 g64): µs per eager call (events around a synchronized loop) and
the cProfile table (top functions by own time and by cumulative time) of ``--calls`` calls.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("data", nargs="?", default=None)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--m", type=int, default=1)
    args = ap.parse_args()
    import torch

    from lowbit import DraftHead

    if args.data:
        from real_head_data import load

        blob = load(args.data)
        w, hidden = blob["weight"].cuda(), blob["hidden"].cuda()
    else:
        w = (torch.randn(49152, 576, device="cuda") * 0.02).bfloat16()
        hidden = torch.randn(4096, 576, device="cuda").bfloat16()
    x = hidden[:args.m]
    for name, kw in (("certified int8", dict(mode="certified", bits=8)), ("fast int4", dict(mode="fast", bits=4))):
        h = DraftHead(w, **kw)
        h.warmup(max_m=args.m, ks=(1,))
        for _ in range(10):
            h.argmax(x)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(args.calls):
            h.argmax(x)
        torch.cuda.synchronize()
        us = (time.perf_counter() - t0) / args.calls * 1e6
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.calls):
            h.argmax(x)
        torch.cuda.synchronize()
        prof.disable()
        s = io.StringIO()
        st = pstats.Stats(prof, stream=s)
        st.sort_stats("tottime").print_stats(30)
        st.sort_stats("cumulative").print_stats(45)
        print(f"===== {name}: {us:.1f} us per eager call (M = {args.m}), {args.calls} calls profiled")
        print(s.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
