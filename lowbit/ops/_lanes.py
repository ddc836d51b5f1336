"""Helpers of the inline-PTX MMA kernels (``coarse_head/triton_mma.py``, ``fp8_gemm/triton_mma.py``),
which keep one value per thread in ``[NT]`` tensors and a thread's short vectors in ``[NT, n]``
tensors: splitting such a vector into its columns stays inside the thread (no layout change)."""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def split2(t, NT: tl.constexpr):
    """[NT, 2] -> its 2 columns as [NT] (in-thread)."""
    return tl.split(tl.reshape(t, [NT, 2]))


@triton.jit
def split4(t, NT: tl.constexpr):
    """[NT, 4] -> its 4 columns as [NT] (in-thread)."""
    a, b = tl.split(tl.reshape(t, [NT, 2, 2]))  # columns 0, 2 / 1, 3
    e0, e2 = tl.split(a)
    e1, e3 = tl.split(b)
    return e0, e1, e2, e3
