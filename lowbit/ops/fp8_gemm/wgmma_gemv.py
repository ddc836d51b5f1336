"""The FP8 wgmma GEMV of ``fp8_gemm`` on sm_90 (Gluon), both operands fed by TMA:
``C[M, N] bf16 = A[M, K] e4m3 (1x128 scales) @ B[N, K] e4m3 (128x128 scales)^T`` for M <= 64.

Why: at small M the GEMM is a weight stream (N K bytes; A is K M bytes, 64x less at M = 64). The
tiled kernels (``tiled.py``) load their tiles through the LSU and wait for every ``tl.dot``.
Here, swap-AB:

* a CTA owns R = 16 W weight rows (W = 4 or 8 warps: one or two warpgroups) and a K range of
  ``PER_SPLIT`` 128-wide blocks; the weight tile [R, 128] is the wgmma's **A operand straight from
  shared memory** and the activations' tile [NB, 128] (NB = M rounded up to 8 / 16 / 32 / 64) its
  B operand, both written by **TMA** into a ring of ``STAGES`` slots (no LSU instructions, no
  registers while in flight; rows past N or M arrive as zeros);
* each block is one ``wgmma.m64nNBk32`` chain (K = 128) from a zero accumulator, waited for, then
  one FFMA an element adds it to the fp32 accumulator times ``a_s[m, kb] * b_s[n / 128, kb]`` --
  the two-level accumulation of the tiled kernels. A CTA's rows lie in one 128-row scale block,
  so that factor is a per-column vector, computed once per CTA for its whole K range in the
  prologue (shared memory, ``[PER_SPLIT, NB]`` fp32);
* ``SPLIT`` CTAs split the K blocks of a row tile so that small N still fills the GPU; their
  partials meet in the same launch, deterministically: the last CTA of a row tile to arrive at
  an ``acq_rel`` counter adds them all in split order (as the FP4 GEMV,
  ``lowbit/ops/fp4_gemm/wgmma_gemv.py``).

A 255 (NaN) UE8M0 scale byte makes its products NaN, as in the reference. Measured against the
other decode kernels: docs/gemm.md. Gluon does not run under ``TRITON_INTERPRET``: the kernel is
tested on the GPU tier (tests/ops/test_fp8_wgmma_gemv.py) and compiled for sm_90 without a GPU by
``tests/sm90``.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import torch
import triton

from lowbit._backend import sm_count
from lowbit.ops._arrival_counters import arrival_counters

try:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (
        fence_async_shared,
        mbarrier,
        tma,
        warpgroup_mma,
        warpgroup_mma_wait,
    )
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from lowbit.ops._gluon_wgmma import acc_layout, e8m0_decode, split_k_epilogue

    GLUON_ERROR = None
except Exception as e:  # noqa: BLE001 - any failure means "no Gluon path"
    GLUON_ERROR = e

__all__ = ["GLUON_ERROR", "MAX_M", "WgmmaGemvConfig", "fp8_wgmma_gemv", "pick_config"]

#: most activation rows one launch serves (the wgmma's N)
MAX_M = 64

if GLUON_ERROR is None:

    @gluon.jit
    def _issue_block(w_desc, x_desc, w_bufs, x_bufs, bars, j, kb0, row0, STAGES: gl.constexpr, pred):
        """TMA of the CTA's block j (global K block kb0 + j) into ring slot j % STAGES."""
        slot = j % STAGES
        bar = bars.index(slot)
        mbarrier.expect(bar, w_desc.block_type.nbytes + x_desc.block_type.nbytes, pred=pred)
        tma.async_copy_global_to_shared(w_desc, [row0, (kb0 + j) * 128], bar, w_bufs.index(slot), pred)
        tma.async_copy_global_to_shared(x_desc, [0, (kb0 + j) * 128], bar, x_bufs.index(slot), pred)

    @gluon.jit
    def _stage_scales(sc_smem, as_ptr, bs_ptr, M, KB, kb0, n_my, bs_row, PER: gl.constexpr, NB: gl.constexpr,
                      W: gl.constexpr, AS_E8M0: gl.constexpr, BS_E8M0: gl.constexpr):
        """``sc[j, m] = a_s[m, kb0 + j] * b_s[bs_row, kb0 + j]`` for the CTA's blocks j < n_my and
        rows m < M (else 0) into the [PER, NB] fp32 shared buffer."""
        sl: gl.constexpr = gl.BlockedLayout([1, 1], [4, 8], [W, 1], [1, 0])
        j = gl.expand_dims(gl.arange(0, PER, layout=gl.SliceLayout(1, sl)), 1)
        m = gl.expand_dims(gl.arange(0, NB, layout=gl.SliceLayout(0, sl)), 0)
        ok = (j < n_my) & (m < M)
        if AS_E8M0:
            sa = e8m0_decode(gl.load(as_ptr + m * KB + kb0 + j, mask=ok, other=127).to(gl.int32))
        else:
            sa = gl.load(as_ptr + m * KB + kb0 + j, mask=ok, other=1.0)
        if BS_E8M0:
            sb = e8m0_decode(gl.load(bs_ptr + bs_row * KB + kb0 + j, mask=j < n_my, other=127).to(gl.int32))
        else:
            sb = gl.load(bs_ptr + bs_row * KB + kb0 + j, mask=j < n_my, other=1.0)
        sc_smem.store(gl.where(ok, sa * sb, 0.0))

    @gluon.jit
    def _refill(w_desc, x_desc, w_bufs, x_bufs, bars, j, kb0, row0, n_my, STAGES: gl.constexpr,
                PER_SPLIT: gl.constexpr, pred):
        """Block j has retired in every warpgroup (the CTA barrier): load block j + STAGES into its
        slot. Nothing to do when the CTA's blocks all fit the ring (every load was issued up front)."""
        if PER_SPLIT > STAGES:
            gl.thread_barrier()
            _issue_block(w_desc, x_desc, w_bufs, x_bufs, bars, j + STAGES, kb0, row0, STAGES,
                         pred & (j + STAGES < n_my))

    @gluon.jit
    def _block_sum(w_desc, x_desc, w_bufs, x_bufs, bars, sc_rows, kb0, row0, n_my, R: gl.constexpr,
                   NB: gl.constexpr, mma: gl.constexpr, STAGES: gl.constexpr, PER_SPLIT: gl.constexpr):
        """sum_j d_j * sc[j] over the CTA's blocks, each block's wgmma waited for before its FFMAs
        (few registers: other CTAs of the SM fill the gaps)."""
        col_l: gl.constexpr = gl.SliceLayout(0, mma)
        acc = gl.zeros([R, NB], gl.float32, mma)
        zero = gl.zeros([R, NB], gl.float32, mma)
        for j in range(0, n_my):
            slot = j % STAGES
            mbarrier.wait(bars.index(slot), (j // STAGES) & 1)
            d = warpgroup_mma(w_bufs.index(slot), x_bufs.index(slot).permute((1, 0)), zero, use_acc=False,
                              is_async=True)
            d = warpgroup_mma_wait(num_outstanding=0, deps=(d, ))
            _refill(w_desc, x_desc, w_bufs, x_bufs, bars, j, kb0, row0, n_my, STAGES, PER_SPLIT, True)
            acc = acc + d * gl.expand_dims(sc_rows.index(j).load(col_l), 0)
        return acc

    @gluon.jit(do_not_specialize=["M", "KB"])
    def _fp8_wgmma_gemv_kernel(w_desc, x_desc, as_ptr, bs_ptr, c_ptr, ws_ptr, cnt_ptr, M, N, KB,
                               NB: gl.constexpr, PER_SPLIT: gl.constexpr, PER_ALLOC: gl.constexpr,
                               STAGES: gl.constexpr, SPLIT: gl.constexpr, AS_E8M0: gl.constexpr,
                               BS_E8M0: gl.constexpr, W: gl.constexpr):
        """Program (row tile, split): weight rows R p .. R p + R - 1 (R = 16 W), K blocks [split *
        PER_SPLIT, min(+ PER_SPLIT, KB)). ``w_desc``: TMA descriptor of the weight e4m3 [N, K], box
        [R, 128]; ``x_desc``: of the activations e4m3 [M, K], box [NB, 128]; ``as_ptr``: [M, KB]
        fp32 (or UE8M0 bytes); ``bs_ptr``: [ceil(N / 128), KB] fp32 (or UE8M0 bytes); ``c_ptr``:
        bf16 [M, N]; ``ws_ptr``: fp32 [SPLIT, NB, N] partials and ``cnt_ptr``: int32 [N / R]
        arrival counters (zero between launches; SPLIT > 1 only). PER_ALLOC: PER_SPLIT rounded up to
        a power of two (shared-memory shapes must be)."""
        R: gl.constexpr = 16 * W
        mma: gl.constexpr = acc_layout(NB, W)
        row_l: gl.constexpr = gl.SliceLayout(1, mma)
        col_l: gl.constexpr = gl.SliceLayout(0, mma)

        pid_n = gl.program_id(0)
        pid_k = gl.program_id(1)
        row0 = pid_n * R
        kb0 = pid_k * PER_SPLIT
        n_my = gl.minimum(PER_SPLIT, KB - kb0)

        w_bufs = gl.allocate_shared_memory(gl.float8e4nv, [STAGES, R, 128], w_desc.layout)
        x_bufs = gl.allocate_shared_memory(gl.float8e4nv, [STAGES, NB, 128], x_desc.layout)
        sc_smem = gl.allocate_shared_memory(gl.float32, [PER_ALLOC, NB], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
        # the same bytes with a rank-1 order: row j as a [NB] vector (``index`` drops the first dim)
        sc_rows = sc_smem._reinterpret(gl.float32, [PER_ALLOC, NB], gl.SwizzledSharedLayout(1, 1, 1, [0]))
        bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(STAGES):
            mbarrier.init(bars.index(i), count=1)
        fence_async_shared()  # barrier inits visible to the TMA unit before the first copy

        for j in gl.static_range(STAGES):
            _issue_block(w_desc, x_desc, w_bufs, x_bufs, bars, j, kb0, row0, STAGES, j < n_my)
        _stage_scales(sc_smem, as_ptr, bs_ptr, M, KB, kb0, n_my, row0 // 128, PER_ALLOC, NB, W, AS_E8M0, BS_E8M0)
        gl.thread_barrier()  # the scales' stores before any warp reads them

        acc = _block_sum(w_desc, x_desc, w_bufs, x_bufs, bars, sc_rows, kb0, row0, n_my, R, NB, mma, STAGES,
                         PER_SPLIT)
        for i in gl.static_range(STAGES):
            mbarrier.invalidate(bars.index(i))

        rows = row0 + gl.expand_dims(gl.arange(0, R, layout=row_l), 1)  # weight row n
        cols = gl.expand_dims(gl.arange(0, NB, layout=col_l), 0)  # activation row m
        ok = (rows < N) & (cols < M)
        split_k_epilogue(acc, c_ptr, ws_ptr, cnt_ptr, pid_n, pid_k, rows, cols, ok, N, NB, SPLIT)


class WgmmaGemvConfig(NamedTuple):
    """Launch configuration of :func:`fp8_wgmma_gemv`: a ring of ``stages`` K blocks, ``split`` CTAs
    a row tile along K, ``warps`` (4 or 8) warps a CTA, 16 ``warps`` weight rows a CTA."""

    stages: int
    split: int
    warps: int = 4


def _nb(m: int) -> int:
    """Activation rows of the TMA box and the wgmma's N: M rounded up to 8, 16, 32 or 64 (rows
    past M arrive as zeros; a box much taller than M measured slower, docs/gemm.md)."""
    return max(8, triton.next_power_of_2(m))


def pick_config(n: int, k: int, m: int = 1, sms: int = 132) -> WgmmaGemvConfig:
    """8 warps (128 rows a CTA) where that still gives the GPU a CTA an SM, else 4; K split until
    the grid holds about two CTAs an SM, each with >= 8 blocks; a ring of 4 slots (fewer when the
    CTA has fewer blocks). Measured where it is used (M = 9..16) and at M = 1 / 64: docs/gemm.md."""
    kb = k // 128
    w = 8 if -(-n // 128) >= sms // 2 else 4
    tiles = -(-n // (16 * w))
    split = max(1, min(-(-2 * sms // tiles), kb // 8))
    per = -(-kb // split)
    return WgmmaGemvConfig(min(4, per), -(-kb // per), w)
@functools.cache
def _box_layouts(rows: int, nb: int):
    """Shared layouts of the TMA boxes (weights [rows, 128], activations [nb, 128]; 128-byte
    swizzle, what the wgmma reads), built once per shape."""
    return (gl.NVMMASharedLayout.get_default_for([rows, 128], gl.float8e4nv),
            gl.NVMMASharedLayout.get_default_for([nb, 128], gl.float8e4nv))


def fp8_wgmma_gemv(a: torch.Tensor, a_s: torch.Tensor, b: torch.Tensor, b_s: torch.Tensor,
                   config: WgmmaGemvConfig | tuple | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """a e4m3 [M, K] (1 <= M <= 64, K % 128 == 0, contiguous), a_s [M, K/128]; b e4m3 [N, K]
    (contiguous), b_s [ceil(N/128), K/128]; scales fp32 or float8_e8m0fnu. Returns bf16 [M, N]
    (``out`` if given). ``config`` (a :class:`WgmmaGemvConfig` or its fields as a tuple; default
    :func:`pick_config`). Launches with SPLIT > 1 use the current stream's arrival counters
    (:mod:`lowbit.ops._arrival_counters`): two streams may run them at once."""
    if GLUON_ERROR is not None:
        raise RuntimeError(f"fp8_wgmma_gemv needs triton.experimental.gluon: {GLUON_ERROR}")
    m, k = a.shape
    n = b.shape[0]
    kb = k // 128
    if not 1 <= m <= MAX_M or k % 128:
        raise ValueError(f"fp8_wgmma_gemv serves 1 <= M <= {MAX_M} and K % 128 == 0, "
                         f"got a of shape {tuple(a.shape)}")
    if b.shape != (n, k) or a_s.shape != (m, kb) or b_s.shape != (-(-n // 128), kb):
        raise ValueError(f"fp8_wgmma_gemv needs b [N, K], a_s [M, K/128] and b_s [ceil(N/128), K/128] for "
                         f"a {tuple(a.shape)}, got b {tuple(b.shape)}, a_s {tuple(a_s.shape)}, b_s {tuple(b_s.shape)}")
    bad = [name for name, t in (("a", a), ("a_s", a_s), ("b", b), ("b_s", b_s)) if not t.is_contiguous()]
    if bad:
        raise ValueError(f"fp8_wgmma_gemv needs contiguous operands, got non-contiguous {', '.join(bad)}")
    cfg = WgmmaGemvConfig(*config) if config is not None else pick_config(n, k, m, sm_count(a.device, interpret=132))
    if cfg.stages < 1 or cfg.split < 1 or cfg.warps not in (4, 8):
        raise ValueError(f"fp8_wgmma_gemv config (STAGES, SPLIT[, W]) needs STAGES >= 1, SPLIT >= 1 and W in "
                         f"(4, 8), got {tuple(cfg)}")
    w = cfg.warps
    per = -(-kb // cfg.split)
    split = -(-kb // per)  # no empty splits
    nb = _nb(m)
    rows = 16 * w
    if out is not None and (out.shape != (m, n) or out.dtype != torch.bfloat16 or not out.is_contiguous()
                            or out.device != a.device):
        raise ValueError(f"fp8_wgmma_gemv out must be a contiguous bf16 [{m}, {n}] tensor on {a.device}, got "
                         f"{out.dtype} {tuple(out.shape)} on {out.device}")
    c = torch.empty(m, n, dtype=torch.bfloat16, device=a.device) if out is None else out
    w_layout, x_layout = _box_layouts(rows, nb)
    w_desc = TensorDescriptor.from_tensor(b, [rows, 128], w_layout)
    x_desc = TensorDescriptor.from_tensor(a, [nb, 128], x_layout)
    tiles = triton.cdiv(n, rows)
    if split > 1:
        ws = torch.empty(split, nb, n, dtype=torch.float32, device=a.device)
        cnt = arrival_counters(a.device, tiles, "fp8_wgmma_gemv")
    else:
        ws = c
        cnt = c
    as_e8m0 = a_s.dtype == torch.float8_e8m0fnu
    bs_e8m0 = b_s.dtype == torch.float8_e8m0fnu
    _fp8_wgmma_gemv_kernel[(tiles, split)](
        w_desc, x_desc, a_s.view(torch.uint8) if as_e8m0 else a_s, b_s.view(torch.uint8) if bs_e8m0 else b_s, c,
        ws, cnt, m, n, kb, NB=nb, PER_SPLIT=per, PER_ALLOC=triton.next_power_of_2(per), STAGES=min(cfg.stages, per),
        SPLIT=split, AS_E8M0=as_e8m0, BS_E8M0=bs_e8m0, W=w, num_warps=w)
    return c
