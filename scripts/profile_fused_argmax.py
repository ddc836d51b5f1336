"""Driver for ncu: the fused certified argmax (``lowbit/ops/coarse_head/fused_argmax.py``) on
SmolLM2's head and real hidden states, a few calls at one M.

    ncu -k regex:fused_argmax --launch-skip 3 --launch-count 1 --section SpeedOfLight \\
        --section WarpStateStats --section Occupancy --section LaunchStats \\
        python3 scripts/profile_fused_argmax.py .realhead/smollm2_head.pt.xz 64
"""
from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main() -> int:
    import torch

    from lowbit import DraftHead
    from real_head_data import load

    m = int(sys.argv[2])
    blob = load(sys.argv[1])
    w = blob["weight"].cuda()
    hidden = blob["hidden"].cuda()
    head = DraftHead(w, mode="certified")
    for i in range(6):
        head.argmax(hidden[i * m:(i + 1) * m])
    torch.cuda.synchronize()
    print(head.stats)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
