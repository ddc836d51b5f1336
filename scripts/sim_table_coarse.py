"""Fast-mode accuracy of the INT2 coarse pass's two integer numerics, on the real model's head
(CPU, no GPU needed): what rounding the group scales to integer multiples of a per-row unit costs.

    python scripts/sim_table_coarse.py .realhead/smollm2_head.pt.xz [--kcand 8] [--rerank 32,64]

* ``wgmma``: today's int8-wgmma pass -- x rounded to int8 per row, the INT2 rows exact:
  ``sx * sum_g s_g (sum q xq - z xsum)``.
* ``table``: the whole-row integer pass -- each group's scale rounded to ``A_g * r_n`` (``A_g`` a
  small integer, ``r_n`` one fp32 unit per token row, ``|A_g (q - z)| <= 127``), so a code
  decodes to the int8 ``A_g (q - z)`` and the row's dot accumulates in int32 over all of K:
  ``sx * r_n * sum_k A_g(k) (q_k - z_g(k)) xq_k``.

Per configuration: argmax agreement of fast mode (per 128-token block the ``kcand`` best coarse
logits, the ``rerank`` best of those rescored exactly) with the exact head, and recall@16 (the
exact top-16 found among the reranked tokens), over the file's hidden states.
"""
from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("data")
    ap.add_argument("--bits", type=int, default=2)
    ap.add_argument("--group", type=int, default=64)
    ap.add_argument("--kcand", type=int, default=8)
    ap.add_argument("--rerank", default="32,64")
    ap.add_argument("--positions", type=int, default=8192)
    args = ap.parse_args()
    import torch

    from lowbit.formats.intx import INTx
    from lowbit.ops.coarse_head.gluon_wgmma import table_coefficients
    from lowbit.ops.coarse_head.x_int8 import x_int8_reference
    from scripts.real_head_data import load

    d = load(args.data)
    hidden = d["hidden"][: args.positions].float()
    weight = d["weight"].float()
    n, k = weight.shape
    fmt = INTx.quantize(weight, bits=args.bits, group_size=args.group)
    codes = fmt.codes().float()[:, :k]
    g_of_k = torch.arange(k) // args.group
    s = fmt.scale.float()[:, g_of_k]
    z = fmt.zero.float()[:, g_of_k]
    a, r = table_coefficients(fmt.scale, fmt.zero, args.bits)
    w_exact = (codes - z) * s
    w_table = (codes - z) * a.float()[:, g_of_k] * r[:, None]
    real = a[:, : -(-k // args.group)].float()  # the groups past K are the packing's padding
    err = (real * r[:, None] - fmt.scale.float()[:, : real.shape[1]]) / fmt.scale.float()[:, : real.shape[1]]
    print(f"head {n} x {k}, INT{args.bits} g{args.group}, {hidden.shape[0]} positions; "
          f"A_g: mean {real.mean():.1f}, min {real.min():.0f}, share < 8: {(real < 8).float().mean():.4f}; "
          f"relative scale error rms {err.pow(2).mean().sqrt():.4f}, max {err.abs().max():.4f}")
    exact = hidden @ weight.t()
    top16 = exact.topk(16, dim=1).indices
    best = exact.argmax(dim=1)
    xq, sx = x_int8_reference(hidden)
    xd = xq.float() * sx[:, None]
    block = 128
    nblk = -(-n // block)
    for name, w in (("exact-x", w_exact), ("wgmma", w_exact), ("table", w_table)):
        xs = hidden if name == "exact-x" else xd
        coarse = xs @ w.t()
        pad = torch.full((coarse.shape[0], nblk * block - n), float("-inf"))
        kb = torch.cat([coarse, pad], 1).view(-1, nblk, block).topk(args.kcand, dim=2)
        cand_val = kb.values.reshape(coarse.shape[0], -1)
        cand_idx = (kb.indices + torch.arange(nblk)[None, :, None] * block).reshape(coarse.shape[0], -1)
        for rr in (int(v) for v in args.rerank.split(",")):
            sel = cand_idx.gather(1, cand_val.topk(rr, dim=1).indices)
            got = exact.gather(1, sel)
            pick = sel.gather(1, got.argmax(dim=1, keepdim=True)).squeeze(1)
            agree = (pick == best).float().mean().item()
            rec = (top16[:, :, None] == sel[:, None, :]).any(-1).float().mean().item()
            print(f"{name:8s} k{args.kcand} r{rr}: argmax agreement {100 * agree:.3f}%  recall@16 of the set {100 * rec:.2f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
