"""Where the int8-wgmma coarse pass's logits differ from fp64 (a diagnosis aid): per case, the
relative error for each (pipe, magic) option, whether the GPU's int8 x tiles equal the torch
definition, and the rows m / token blocks holding the error.

    python3 scripts/diag_coarse_wgmma.py
"""
from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import torch  # noqa: E402

from lowbit.formats import INTx  # noqa: E402
from lowbit.ops.coarse_head import gluon_wgmma as g  # noqa: E402
from lowbit.ops.coarse_head.x_int8 import tile_reference, x_int8_reference, x_int8_tiles  # noqa: E402

CASES = [(2, 128, 4100, 2048, 9, 128), (4, 128, 1536, 1024, 16, 64), (2, 64, 3000, 1280, 64, 128),
         (2, 64, 640, 5120, 17, 128), (2, 64, 1000, 640, 1, 128)]


def main():
    for bits, group, n, k, m, block in CASES:
        torch.manual_seed(0)
        w = torch.randn(n, k) * 0.05
        w[: n // 3, : k // 5] *= 8.0
        f = INTx.quantize(w, bits=bits, group_size=group)
        gen = torch.Generator().manual_seed(2)
        x = torch.randn(m, k, generator=gen)
        x[:, 3] *= 40.0
        x = x.to(torch.bfloat16)
        ell = f.packed.shape[1]
        nb = max(8, 1 << (m - 1).bit_length())
        q, sx = x_int8_reference(x)
        tq, ts = tile_reference(q, ell, 8 // bits, nb)
        gq, gs, gsx = x_int8_tiles(x.cuda(), ell, 8 // bits, nb)
        print(f"case bits {bits} g{group} n {n} k {k} m {m} block {block}: tiles equal {torch.equal(gq.cpu(), tq)}, "
              f"sx equal {torch.equal(gsx.cpu()[:m], sx)}", flush=True)
        want = (q.double() * sx.double()[:, None]) @ f.dequantize(torch.float64).T
        words = g.wgmma_sz(f.scale, f.zero, bits, group, ell).cuda()
        for pipe in (False, True):
            for magic in (False, True):
                lg = g.coarse_wgmma(x.cuda(), f.packed.cuda(), words, n=n, bits=bits, block=block, kcand=4,
                                    write_logits=True, pipe=pipe, magic=magic)[5].cpu().double()
                err = (lg - want).abs()
                rel = ((lg - want).norm() / want.norm()).item()
                rows = (err.amax(1) > 1e-4 * want.abs().max()).nonzero().flatten().tolist()
                toks = (err.amax(0) > 1e-4 * want.abs().max()).nonzero().flatten()
                blocks = sorted(set((toks // block).tolist()))
                print(f"   pipe {pipe} magic {magic}: rel {rel:.3e}, bad rows {rows[:20]}, bad token blocks "
                      f"{blocks[:20]} ({toks.numel()} tokens), max err {err.max().item():.3e}", flush=True)


if __name__ == "__main__":
    main()
