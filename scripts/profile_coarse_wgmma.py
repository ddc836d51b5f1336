"""ncu target: four launches of the int8-wgmma coarse pass on a 124160 x 5120 head (python3 scripts/profile_coarse_wgmma.py BITS M)."""
import sys, torch
sys.path.insert(0, '.')
from lowbit.formats import INTx
from lowbit.ops.coarse_head.gluon_wgmma import coarse_wgmma, wgmma_sz
bits, m = int(sys.argv[1]), int(sys.argv[2])
torch.manual_seed(0)
w = torch.randn(124160, 5120, device="cuda", dtype=torch.bfloat16) * 0.02
f = INTx.quantize(w, bits=bits, group_size=64)
sz = wgmma_sz(f.scale, f.zero, bits, 64, f.packed.shape[1])
x = torch.randn(m, 5120, device="cuda", dtype=torch.bfloat16)
for _ in range(4):
    coarse_wgmma(x, f.packed, sz, n=124160, bits=bits, block=128, kcand=8, write_logits=False)
torch.cuda.synchronize()
