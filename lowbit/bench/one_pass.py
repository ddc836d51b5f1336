"""A measured "one pass" baseline: a kernel that reads an op's input rows once and writes its
output rows once, with no arithmetic in between.

For a small memory-bound op, bytes / copy bandwidth is not a reachable floor: a few MB move in
well under a microsecond, while any kernel's launch, first-load latency and tail cost more than
that. What a target such as "within 2x of one pass over its inputs and outputs" can be measured
against is a real pass with the same access pattern, timed the same way in the same run. This
module provides it for row-wise ops: input ``[R, W_in]`` contiguous fp32 rows, outputs
``[R, w]`` for each output width ``w``, every output element a copy of one input element.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _copy_cols(x, o_r, m_r, o_c, out_ptr, C0: tl.constexpr, W: tl.constexpr):
    """Store columns [C0, C0 + W) of the row tile x [BLOCK_R, W_PAD] to out [R, W]."""
    m_c = (o_c >= C0) & (o_c < C0 + W)
    tl.store(out_ptr + o_r[:, None] * W + (o_c - C0)[None, :], x, mask=m_r[:, None] & m_c[None, :])


@triton.jit
def _split_rows_kernel(x_ptr, out0_ptr, out1_ptr, out2_ptr, R,
                       W_IN: tl.constexpr, W_PAD: tl.constexpr, W0: tl.constexpr, W1: tl.constexpr,
                       W2: tl.constexpr, BLOCK_R: tl.constexpr):
    """Row r of x [R, W_IN] -> out0[r] = x[r, :W0], out1[r] = x[r, W0:W0+W1], out2[r] = the rest."""
    o_r = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    m_r = o_r < R
    o_c = tl.arange(0, W_PAD)
    x = tl.load(x_ptr + o_r[:, None] * W_IN + o_c[None, :], mask=m_r[:, None] & (o_c < W_IN)[None, :])
    _copy_cols(x, o_r, m_r, o_c, out0_ptr, 0, W0)
    _copy_cols(x, o_r, m_r, o_c, out1_ptr, W0, W1)
    _copy_cols(x, o_r, m_r, o_c, out2_ptr, W0 + W1, W2)


def split_rows(x: torch.Tensor, widths: tuple[int, int, int], block_r: int = 64, num_warps: int = 4):
    """One pass: x [R, sum(widths)] contiguous -> three new [R, w] tensors holding its column
    blocks. Same bytes in and out as a row-wise op with those output widths."""
    r, w_in = x.shape
    if sum(widths) != w_in or not x.is_contiguous():
        raise ValueError(f"split_rows: x must be contiguous [R, {sum(widths)}], got {tuple(x.shape)}")
    outs = [torch.empty(r, w, dtype=x.dtype, device=x.device) for w in widths]
    _split_rows_kernel[(triton.cdiv(r, block_r),)](
        x, *outs, r, W_IN=w_in, W_PAD=triton.next_power_of_2(w_in), W0=widths[0], W1=widths[1], W2=widths[2],
        BLOCK_R=block_r, num_warps=num_warps)
    return outs
