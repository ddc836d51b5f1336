"""Gluon pieces shared by the wgmma kernels (``fp8_gemm/wgmma_gemm.py``, ``fp8_gemm/wgmma_gemv.py``,
``fp4_gemm/wgmma_gemv.py``, ``coarse_head/gluon_wgmma.py``): the accumulator layout, the per-warp
row bases, the layout that hands every lane of a row its CTA's 4 per-row words, the split of
such a [R, 4] tensor, the UE8M0 scale decode, the swap-AB GEMVs' split-K epilogue, and the
mbarriers of a warp-specialized TMA ring (``ring_barriers`` / ``invalidate_ring_barriers``).

Importing this module raises when Gluon is missing; the kernels import it inside their own
``try`` (``GLUON_ERROR``)."""
from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier

__all__ = ["acc_layout", "e8m0_decode", "four", "invalidate_ring_barriers", "ring_barriers", "row_words_layout",
           "split_k_epilogue", "warp_rows"]

_F32_NAN_BITS = gl.constexpr(0x7FC00000)
_F32_2M127_BITS = gl.constexpr(0x00400000)  # 2^-127: UE8M0 byte 0 is an fp32 subnormal


@gluon.constexpr_function
def acc_layout(NB, W):
    """The wgmma accumulator [16 W, NB] of W warps (8-bit operands: instruction K = 32)."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[W, 1], instr_shape=[16, NB, 32])


@gluon.constexpr_function
def warp_rows(W):
    """Warp bases of a [16 W, ...] linear layout: warp w owns rows 16 w .. 16 w + 15."""
    return [[16 << i, 0] for i in range(W.bit_length() - 1)]


@gluon.constexpr_function
def row_words_layout(W):
    """int32 [16 W, 4] (row, word): every lane of row g holds the 4 words of rows g and g + 8, so
    each column is a register in the accumulator's row layout."""
    return gl.DistributedLinearLayout(reg_bases=[[0, 1], [0, 2], [8, 0]],
                                      lane_bases=[[0, 0], [0, 0], [1, 0], [2, 0], [4, 0]],
                                      warp_bases=warp_rows(W), block_bases=[], shape=[16 * W, 4])


@gluon.jit
def e8m0_decode(e):
    """UE8M0 byte (int32 0..255) -> fp32 2^(e-127); 0 -> 2^-127 (subnormal), 255 -> NaN."""
    bits = gl.where(e == 0, _F32_2M127_BITS, e << 23)
    bits = gl.where(e == 255, _F32_NAN_BITS, bits)
    return bits.to(gl.float32, bitcast=True)


@gluon.jit
def four(v):
    """[R, 4] -> its 4 columns ([R] each), in order."""
    a, b = gl.split(gl.reshape(v, [v.shape[0], 2, 2]))  # a: columns 0, 2; b: 1, 3
    c0, c2 = gl.split(a)
    c1, c3 = gl.split(b)
    return c0, c1, c2, c3


@gluon.jit
def split_k_epilogue(part, c_ptr, ws_ptr, cnt_ptr, pid_n, pid_k, rows, cols, ok, N, NB: gl.constexpr,
                     SPLIT: gl.constexpr):
    """Write a swap-AB GEMV's fp32 tile ``part`` (weight rows ``rows`` x activation rows ``cols``,
    stored where ``ok``) as ``c[cols, rows]`` bf16. With SPLIT > 1 each K split stores its partial
    in ``ws`` fp32 [SPLIT, NB, N]; the last CTA of row tile ``pid_n`` to arrive at its int32 counter
    adds all SPLIT partials in split order (deterministic) and resets the counter to zero.

    The CTA barrier orders every thread's partial stores before the one atomic; its release (gpu
    scope) publishes them, and the acquire of the last arrival makes all splits' partials visible
    to it (read from L2 with .cg)."""
    if SPLIT == 1:
        gl.store(c_ptr + cols * N + rows, part.to(gl.bfloat16), mask=ok)
    else:
        gl.store(ws_ptr + (pid_k * NB + cols) * N + rows, part, mask=ok)
        gl.thread_barrier()
        arrived = gl.atomic_add(cnt_ptr + pid_n, 1, sem="acq_rel", scope="gpu")
        if arrived == SPLIT - 1:
            tot = gl.zeros_like(part)
            for sp in gl.static_range(SPLIT):
                tot = tot + gl.load(ws_ptr + (sp * NB + cols) * N + rows, mask=ok, other=0.0, cache_modifier=".cg")
            gl.store(c_ptr + cols * N + rows, tot.to(gl.bfloat16), mask=ok)
            gl.store(cnt_ptr + pid_n, 0)


@gluon.jit
def ring_barriers(STAGES: gl.constexpr, CONSUMERS: gl.constexpr = 1):
    """(ready, empty, side): the mbarriers of a warp-specialized TMA ring of STAGES slots -- a
    ``ready`` (the slot's TMA landed) and an ``empty`` (the consumers released it) per slot -- and
    one ``side`` barrier for a load outside the ring (x resident, a block's words); each of count
    1 (``empty``: CONSUMERS, one arrival per consumer partition), initialized and fenced for the
    async proxy before the partitions start."""
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    side = gl.allocate_shared_memory(gl.int64, [1, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=CONSUMERS)
    mbarrier.init(side.index(0), count=1)
    fence_async_shared()
    return ready, empty, side


@gluon.jit
def invalidate_ring_barriers(ready, empty, side, STAGES: gl.constexpr):
    """Invalidate :func:`ring_barriers`' barriers once the partitions have joined."""
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(i))
        mbarrier.invalidate(empty.index(i))
    mbarrier.invalidate(side.index(0))
