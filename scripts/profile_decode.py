"""One decode-size kernel launch per case, for Nsight Compute on the H200 (and the timer's floor).

    ncu -k regex:mma_gemv --launch-skip 2 --launch-count 1 --section SpeedOfLight \
        --section WarpStateStats --section Occupancy python3 scripts/profile_decode.py gemv fp4 1 7168 16384 2 8
    ncu -k regex:coarse_mma --launch-skip 2 --launch-count 1 ... python3 scripts/profile_decode.py head 4 8
    python3 scripts/profile_decode.py floor     # cold_us of an empty-ish kernel and of small copies

``gemv FMT M N K RT W``: ``mma_gemv`` (fp8_gemm/triton_mma.py) three times (two warm-ups).
``wgmma M N K STAGES SPLIT W PIPE``: the Gluon FP4 GEMV (fp4_gemm/gluon_wgmma_gemv.py) three times
(ncu ``-k regex:fp4_wgmma``).
``head BITS M``: the draft head's tensor-core coarse pass (124160 x 5120, g64, block 128) three
times. ``gathered K B T``: NVFP4 ``gathered_bias`` (V = 131072, the picked tensor-core config) three
times (ncu ``-k regex:gathered_mma``). ``floor``: what ``lowbit.bench.gemm.cold_us`` (the GEMM benchmark's timer: cold L2,
CUDA-graph replay) reports for a one-element add and for 1 / 8 / 32 MB copies — the fixed cost
under every decode-size number.
"""
from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def main(argv: list[str]) -> int:
    import torch

    torch.manual_seed(0)
    what = argv[0]
    if what == "gemv":
        from lowbit.bench.gemm import _gemm_operands
        from lowbit.ops.fp8_gemm.triton_mma import mma_gemv

        fmt, m, n, k, rt, w = argv[1], *(int(v) for v in argv[2:7])
        a, _, wq = _gemm_operands(m, n, k, fp4=fmt == "fp4")
        bd = wq.packed if fmt == "fp4" else wq.data
        for _ in range(3):
            mma_gemv(a.data, a.scale, bd, wq.scale, fp4=fmt == "fp4", config=(rt, w))
    elif what == "wgmma":
        from lowbit.bench.gemm import _gemm_operands
        from lowbit.ops.fp4_gemm.gluon_wgmma_gemv import fp4_wgmma_gemv

        m, n, k, stages, split, w, pipe = (int(v) for v in argv[1:8])
        a, _, wq = _gemm_operands(m, n, k, fp4=True)
        for _ in range(3):
            fp4_wgmma_gemv(a.data, a.scale, wq.packed, wq.scale, config=(stages, split, w), pipe=bool(pipe))
    elif what == "head":
        from lowbit import DraftHead
        from lowbit.ops.coarse_head import BOUND_NONE, coarse_head

        bits, m = int(argv[1]), int(argv[2])
        head = DraftHead(torch.randn(124160, 5120, device="cuda", dtype=torch.bfloat16) * 0.02, bits=bits, mode="fast")
        p = head._ensure_packed()
        x = torch.randn(m, 5120, device="cuda", dtype=torch.bfloat16)
        for _ in range(3):
            coarse_head(x, p, block=128, kcand=head.kcand, bound=BOUND_NONE)
    elif what == "gathered":
        from lowbit.formats import NVFP4
        from lowbit.ops import gathered_bias

        k, b, t = (int(v) for v in argv[1:4])
        w = NVFP4.quantize(torch.randn(131072, k, device="cuda") * 0.02)
        x = torch.randn(b, k, device="cuda", dtype=torch.bfloat16)
        values = torch.randn(b, t, device="cuda")
        idx = torch.randint(0, 131072, (b, t), device="cuda")
        logits = torch.zeros(b, 131072, device="cuda", dtype=torch.bfloat16)
        for _ in range(3):
            gathered_bias(x, w, values, idx, logits)
    elif what == "floor":
        from lowbit.bench.gemm import cold_us

        one = torch.zeros(1, device="cuda")
        print(f"one-element add: {cold_us(lambda: one.add_(1.0), graph=True):.2f} us")
        for mb in (1, 8, 32):
            src = torch.empty(mb * 2**20 // 4, device="cuda").uniform_()
            dst = torch.empty_like(src)
            print(f"copy {mb} MB: {cold_us(lambda: dst.copy_(src), graph=True):.2f} us")
    else:
        raise SystemExit(f"unknown case {what!r}: gemv | wgmma | head | gathered | floor")
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
