"""The FP4 ``mma_gemv``'s NaN rule: a 255 (NaN) UE8M0 group scale makes its whole output column NaN,
whichever byte of the packed scale word it is and however many warps split K (the flags of the
warps are combined as "any bit set": byte 3's flag is int32 bit 31, negative as a value)."""
from __future__ import annotations

import pytest
import torch

from lowbit.ops.fp8_gemm import mma_gemv as g


@pytest.mark.parametrize("warps", [1, 2, 4])
def test_nan_group_scale_in_every_byte_makes_its_column_nan(backend, warps):
    if not backend.is_triton:
        pytest.skip("mma_gemv is a Triton kernel")
    gen = torch.Generator().manual_seed(3)
    m, n, k = 3, 32, 256
    a = torch.randn(m, k, generator=gen).to(torch.float8_e4m3fn)
    a_s = torch.rand(m, k // 128, generator=gen) + 0.5
    b = torch.randint(0, 256, (n, k // 2), generator=gen, dtype=torch.uint8)
    b_s = torch.randint(120, 134, (n, k // 32), generator=gen, dtype=torch.uint8)
    nan_cols = {0: 0, 5: 1, 9: 2, 17: 3, 30: 7}  # weight row -> group: bytes 0..3 of a word, and block 1
    for row, grp in nan_cols.items():
        b_s[row, grp] = 255
    cfg = g.pick_config(n, k, m, fp4=True)._replace(warps=warps)
    dev = backend.device
    out = g.mma_gemv(a.to(dev), a_s.to(dev), b.to(dev), b_s.to(dev), True, cfg).float().cpu()
    is_nan = out.isnan()
    want = torch.zeros(m, n, dtype=torch.bool)
    want[:, list(nan_cols)] = True
    assert torch.equal(is_nan, want)
