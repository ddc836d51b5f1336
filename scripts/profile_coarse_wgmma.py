"""ncu target: four launches of the int8-wgmma coarse pass on a 124160 x 5120 head.

    python3 scripts/profile_coarse_wgmma.py BITS M [VARIANT]

VARIANT: ``group`` (default: the per-group pass) or ``table`` (the whole-row variant, with the
module's kernel choice for the M band: warp-specialized up to NB = 32)."""
import sys

import torch

sys.path.insert(0, '.')
from lowbit.formats import INTx  # noqa: E402
from lowbit.ops.coarse_head.gluon_wgmma import coarse_wgmma, wgmma_sz, wgmma_table  # noqa: E402

bits, m = int(sys.argv[1]), int(sys.argv[2])
variant = sys.argv[3] if len(sys.argv) > 3 else "group"
torch.manual_seed(0)
w = torch.randn(124160, 5120, device="cuda", dtype=torch.bfloat16) * 0.02
f = INTx.quantize(w, bits=bits, group_size=64)
ell = f.packed.shape[1]
kw = dict(n=124160, bits=bits, block=128, kcand=8, write_logits=False)
if variant == "group":
    sz = wgmma_sz(f.scale, f.zero, bits, 64, ell)
else:
    sz, r = wgmma_table(f.scale, f.zero, bits, 64, ell)
    kw.update(table_r=r)
x = torch.randn(m, 5120, device="cuda", dtype=torch.bfloat16)
for _ in range(4):
    coarse_wgmma(x, f.packed, sz, **kw)
torch.cuda.synchronize()
