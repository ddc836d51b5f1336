"""Gluon (``triton.experimental.gluon``) kernel for the prefill band of ``fp8_gemm`` on sm_90.

``C[M, N] bf16 = A[M, K] e4m3 @ B[N, K]^T e4m3`` with DeepSeek block scales: ``a_s [M, K/128]``
(one per row and 128-wide K block) and ``b_s [ceil(N/128), K/128]`` (one per 128x128 block of B),
fp32 or UE8M0. Per K block ``kb`` the fp32 product is scaled before it joins the fp32
accumulator (two-level accumulation)::

    acc += dot(A[:, kb], B[:, kb]^T) * a_s[:, kb, None] * b_s[n_block, kb]

Why Gluon: the plain-Triton kernel (``_fp8_gemm_tma_kernel``) lowers ``tl.dot`` to a wgmma that
each warpgroup waits for (``WARPGROUP.DEPBAR``) before its 64 scale FFMAs per thread, so the
tensor cores idle during the scale accumulation (~150 of ~640 cycles per K block). Here each K
block's wgmma is issued asynchronously into a fresh fp32 tile (``use_acc=False``) and the kernel
retires it with ``warpgroup_mma_wait(num_outstanding=1)`` only after the *next* block's wgmma is
in flight, so the FFMAs of block kb overlap the tensor-core work of block kb + 1.

Layout (defaults: 128 x 128 CTA tile, 8 warps):

* Accumulator and dot tiles: ``NVMMADistributedLayout`` v3 with ``warps_per_cta = [8, 1]`` and
  instruction shape ``[16, 128, 32]``: warpgroup g (warps 4g..4g+3) owns rows 64g..64g+63 and all
  128 columns. Per thread: 64 fp32 accumulator registers + 64 for the block being scaled + 64 for
  the block in flight (192; the compile check confirms no spills).
* Shared ring: ``NUM_STAGES`` x (A tile ``[BLOCK_M, 128]`` + B tile ``[BLOCK_N, 128]``) e4m3 in the
  128-byte-swizzled ``NVMMASharedLayout`` TMA writes and wgmma reads (B is K-major; the wgmma sees
  ``b_tile.permute((1, 0))`` as its ``[K, N]`` operand). One mbarrier per stage counts the TMA
  bytes; out-of-bounds rows (M, N edges) arrive zero-filled.
* Scales: ``a_s`` of the tile's rows in ``SliceLayout(1, mma)`` (each thread loads the 2 rows it
  owns), ``b_s`` a scalar (BLOCK_N <= 128 lies inside one 128-row block of B). Both are plain
  loads issued one K block ahead so their latency hides behind a wgmma.

Pipeline (per warpgroup, iteration kb; wgmma kb already in flight on entry)::

    wait TMA of block kb+1 -> issue wgmma kb+1 (async) -> load scales of kb+1
    -> wgmma_wait(1): retires wgmma kb -> acc += d_kb * (a_s * b_s)   [tensor cores busy with kb+1]
    -> CTA barrier -> TMA refill of kb's stage with block kb + NUM_STAGES

The barrier is needed because B's stage is read by both warpgroups' wgmmas while the refill is
issued by one thread: a warpgroup's wgmma wait only covers its own wgmmas, so the stage may be
overwritten only once every warpgroup has retired its wgmma kb. Placing it after the FFMAs keeps
the tensor cores fed (wgmma kb+1 of both warpgroups is queued while warps meet at the barrier).

Epilogue: bf16 tile through shared memory and a TMA store (clips the M, N edges) when the output
row pitch is 16-byte aligned (N % 8 == 0), otherwise a masked ``gl.store`` from the MMA layout.

Grid: one program per output tile, in grouped order (``GROUP_M`` row tiles share a weight tile in
L2, as ``tile_coords`` of the Triton kernel).
"""
from __future__ import annotations

import functools

import torch
import triton

try:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (
        fence_async_shared,
        mbarrier,
        tma,
        warpgroup_mma,
        warpgroup_mma_init,
        warpgroup_mma_wait,
    )
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    _GLUON_IMPORT_ERROR = None
except Exception as e:  # noqa: BLE001 - any failure means "no gluon path"
    _GLUON_IMPORT_ERROR = e

__all__ = ["fp8_gemm_gluon", "gluon_available"]

_BLOCK_K = 128  # the scale block along K: one wgmma group and one scale FMA per K block


def gluon_available() -> bool:
    """True when Gluon imports and the current CUDA device is sm_90 or newer."""
    if _GLUON_IMPORT_ERROR is not None:
        return False
    try:
        return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 9
    except Exception:  # noqa: BLE001
        return False


if _GLUON_IMPORT_ERROR is None:
    _F32_NAN_BITS = gl.constexpr(0x7FC00000)
    _F32_2M127_BITS = gl.constexpr(0x00400000)  # 2^-127: UE8M0 byte 0 is an fp32 subnormal

    @gluon.constexpr_function
    def _mma_layout(BLOCK_M, BLOCK_N, num_warps):
        """wgmma accumulator layout: warps stacked along M so each warpgroup owns
        BLOCK_M / (num_warps / 4) full-width rows (one m16 slab per warp), N in one instruction."""
        assert num_warps % 4 == 0 and BLOCK_M == 16 * num_warps, "need BLOCK_M == 16 * num_warps"
        assert BLOCK_N % 8 == 0 and BLOCK_N <= 256
        return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, BLOCK_N, 32])

    @gluon.jit
    def _e8m0_decode(e):
        """UE8M0 byte (int32 0..255) -> fp32 2^(e-127); 0 -> 2^-127 (subnormal), 255 -> NaN."""
        bits = gl.where(e == 0, _F32_2M127_BITS, e << 23)
        bits = gl.where(e == 255, _F32_NAN_BITS, bits)
        return bits.to(gl.float32, bitcast=True)

    @gluon.jit
    def _row_scales(p, mask, E8M0: gl.constexpr):
        """a_s of the tile's rows at pointers p ([BLOCK_M], rows >= M read as 1)."""
        if E8M0:
            s = _e8m0_decode(gl.load(p, mask=mask, other=127).to(gl.int32))
        else:
            s = gl.load(p, mask=mask, other=1.0)
        return s

    @gluon.jit
    def _block_scale(p, E8M0: gl.constexpr):
        """The scalar b_s at p."""
        if E8M0:
            s = _e8m0_decode(gl.load(p).to(gl.int32))
        else:
            s = gl.load(p)
        return s

    @gluon.jit
    def _tile_coords(M, N, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, GROUP_M: gl.constexpr):
        """(i_m, i_n) of this program, grouped so GROUP_M row tiles share a weight tile in L2."""
        pid = gl.program_id(0)
        n_pm = gl.cdiv(M, BLOCK_M)
        n_pn = gl.cdiv(N, BLOCK_N)
        width = GROUP_M * n_pn
        first_m = (pid // width) * GROUP_M
        rows = gl.minimum(n_pm - first_m, GROUP_M)
        return first_m + (pid % width) % rows, (pid % width) // rows

    @gluon.jit
    def _load_block(a_desc, b_desc, a_bufs, b_bufs, bars, kb, off_m, off_n, NUM_STAGES: gl.constexpr, pred):
        """TMA of K block kb's A / B tiles into stage kb % NUM_STAGES (skipped unless pred).
        The stage's mbarrier expects the full box bytes (zero-filled rows count too)."""
        s = kb % NUM_STAGES
        bar = bars.index(s)
        mbarrier.expect(bar, a_desc.block_type.nbytes + b_desc.block_type.nbytes, pred=pred)
        tma.async_copy_global_to_shared(a_desc, [off_m, kb * 128], bar, a_bufs.index(s), pred)
        tma.async_copy_global_to_shared(b_desc, [off_n, kb * 128], bar, b_bufs.index(s), pred)

    @gluon.jit
    def _issue_mma(a_bufs, b_bufs, bars, kb, tile, use_acc, NUM_STAGES: gl.constexpr):
        """Wait for K block kb's tiles and start its wgmma (returns the in-flight token). The
        result lands in ``tile``'s registers; ``use_acc`` (false at run time) discards its value."""
        s = kb % NUM_STAGES
        mbarrier.wait(bars.index(s), (kb // NUM_STAGES) & 1)
        return warpgroup_mma(a_bufs.index(s), b_bufs.index(s).permute((1, 0)), tile, use_acc=use_acc, is_async=True)

    @gluon.jit
    def _retire(acc, d, s_a, s_b, NUM_OUTSTANDING: gl.constexpr):
        """Wait until at most NUM_OUTSTANDING wgmmas are in flight (so ``d``, the older one, is
        done); returns (acc + d * a_s[:, None] * b_s, d): one FFMA per element (b_s folds into
        a_s), and d's registers are handed to the next wgmma."""
        d = warpgroup_mma_wait(num_outstanding=NUM_OUTSTANDING, deps=(d, ))
        acc = acc + d * gl.expand_dims(s_a * s_b, 1)
        # A second (no-op) wait taking acc pins the FFMAs here: the waits and wgmmas are ordered
        # inline asm, while plain FFMAs would otherwise sink below the next wgmma issue that
        # overwrites d's registers (LLVM then copies d first: 64 MOVs and serialized wgmmas).
        acc = warpgroup_mma_wait(num_outstanding=NUM_OUTSTANDING, deps=(acc, ))
        return acc, d

    @gluon.jit
    def _refill(a_desc, b_desc, a_bufs, b_bufs, bars, kb, off_m, off_n, n_kb, NUM_STAGES: gl.constexpr):
        """Reload the stage of block kb (its wgmma retired by this warpgroup) with block
        kb + NUM_STAGES. The CTA barrier first makes sure every warpgroup has retired its wgmma kb:
        the B tile is shared by both warpgroups and the TMA is issued by a single thread."""
        gl.thread_barrier()
        _load_block(a_desc, b_desc, a_bufs, b_bufs, bars, kb + NUM_STAGES, off_m, off_n, NUM_STAGES,
                    kb + NUM_STAGES < n_kb)

    @gluon.jit(do_not_specialize=["M", "n_kb"])
    def _fp8_gemm_gluon_kernel(
        a_desc, as_ptr, b_desc, bs_ptr, c_ptr, c_desc, M, N, n_kb,
        AS_E8M0: gl.constexpr, BS_E8M0: gl.constexpr, TMA_STORE: gl.constexpr,
        GROUP_M: gl.constexpr, NUM_STAGES: gl.constexpr, num_warps: gl.constexpr,
    ):
        """a_desc: TMA descriptor of A [M, K] e4m3, box [BLOCK_M, 128]; b_desc: B [N, K], box
        [BLOCK_N, 128]; as_ptr: a_s [M, n_kb]; bs_ptr: b_s [ceil(N/128), n_kb] (fp32, or UE8M0
        bytes when *_E8M0); c_ptr: C [M, N] bf16; c_desc: TMA descriptor of C, box
        [BLOCK_M, BLOCK_N] (TMA_STORE only, else None)."""
        BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
        BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
        BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
        gl.static_assert(BLOCK_K == 128, "one K block per scale block")
        gl.static_assert(128 % BLOCK_N == 0, "BLOCK_N must lie inside one 128-row block of b_s")
        gl.static_assert(NUM_STAGES >= 2)
        mma: gl.constexpr = _mma_layout(BLOCK_M, BLOCK_N, num_warps)
        row_l: gl.constexpr = gl.SliceLayout(1, mma)

        i_m, i_n = _tile_coords(M, N, BLOCK_M, BLOCK_N, GROUP_M)
        off_m = i_m * BLOCK_M
        off_n = i_n * BLOCK_N

        a_bufs = gl.allocate_shared_memory(a_desc.dtype, [NUM_STAGES, BLOCK_M, BLOCK_K], a_desc.layout)
        b_bufs = gl.allocate_shared_memory(b_desc.dtype, [NUM_STAGES, BLOCK_N, BLOCK_K], b_desc.layout)
        bars = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(NUM_STAGES):
            mbarrier.init(bars.index(i), count=1)
        fence_async_shared()  # barrier inits visible to the TMA unit before the first copy

        # Blocks 0 .. NUM_STAGES-2 ahead; the loop's first refill (of "block -1") loads NUM_STAGES-1.
        for i in gl.static_range(NUM_STAGES - 1):
            _load_block(a_desc, b_desc, a_bufs, b_bufs, bars, i, off_m, off_n, NUM_STAGES, i < n_kb)

        offs_m = off_m + gl.arange(0, BLOCK_M, layout=row_l)
        m_mask = offs_m < M
        as_rows = as_ptr + offs_m.to(gl.int64) * n_kb  # a_s[row, 0]
        bs_blk = bs_ptr + ((off_n // 128) * n_kb).to(gl.int64)  # b_s[n_block, 0]
        s_a = _row_scales(as_rows, m_mask, AS_E8M0)
        s_b = _block_scale(bs_blk, BS_E8M0)

        acc = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, mma)
        # Two register tiles alternate between "in flight" and "being scaled"; each must keep fixed
        # registers, or ptxas copies an in-flight accumulator and then serializes every wgmma
        # (C7514). So: the loop is unrolled by two (tile A: odd blocks, tile B: even blocks); each
        # wgmma names the tile it overwrites (already scaled) as its accumulator input and ignores
        # it through a scale-d predicate that is false at run time (n_kb < 0 never holds; a
        # compile-time False drops the input and gives the result fresh registers); and both tiles
        # enter the loop as zeros -- tile A as a stand-in for "block -1", retired with scale 0 --
        # so no wgmma result flows into the loop from outside (that one got copied on entry).
        never = n_kb < 0
        d_a = warpgroup_mma_init(gl.zeros([BLOCK_M, BLOCK_N], gl.float32, mma))  # an "in-flight" zero tile
        tile_b = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, mma)
        s_a_a = gl.zeros([BLOCK_M], gl.float32, row_l)
        s_b_a = 0.0
        for i in range(0, n_kb // 2):
            kb = 2 * i  # tile B: block kb, tile A: blocks kb - 1 (retired here) and kb + 1
            d_b = _issue_mma(a_bufs, b_bufs, bars, kb, tile_b, never, NUM_STAGES)
            acc, tile_a = _retire(acc, d_a, s_a_a, s_b_a, 1)
            _refill(a_desc, b_desc, a_bufs, b_bufs, bars, kb - 1, off_m, off_n, n_kb, NUM_STAGES)
            d_a = _issue_mma(a_bufs, b_bufs, bars, kb + 1, tile_a, never, NUM_STAGES)
            s_a_a = _row_scales(as_rows + (kb + 1), m_mask, AS_E8M0)  # used one block later
            s_b_a = _block_scale(bs_blk + (kb + 1), BS_E8M0)
            acc, tile_b = _retire(acc, d_b, s_a, s_b, 1)
            _refill(a_desc, b_desc, a_bufs, b_bufs, bars, kb, off_m, off_n, n_kb, NUM_STAGES)
            kb_next = gl.minimum(kb + 2, n_kb - 1)  # the last pair of an even n_kb reloads its own
            s_a = _row_scales(as_rows + kb_next, m_mask, AS_E8M0)
            s_b = _block_scale(bs_blk + kb_next, BS_E8M0)
        # Tail: tile A holds the last odd block (or the zero stand-in); an odd n_kb leaves one more.
        if n_kb % 2 == 1:
            d_b = _issue_mma(a_bufs, b_bufs, bars, n_kb - 1, tile_b, never, NUM_STAGES)
            acc, tile_a = _retire(acc, d_a, s_a_a, s_b_a, 1)
            acc, tile_b = _retire(acc, d_b, s_a, s_b, 0)
        else:
            acc, tile_a = _retire(acc, d_a, s_a_a, s_b_a, 0)

        for i in gl.static_range(NUM_STAGES):
            mbarrier.invalidate(bars.index(i))
        out = acc.to(gl.bfloat16)
        if TMA_STORE:
            # The output buffer may alias the ring: wait until every warpgroup's last wgmma is done.
            gl.thread_barrier()
            c_smem = gl.allocate_shared_memory(gl.bfloat16, [BLOCK_M, BLOCK_N], c_desc.layout)
            c_smem.store(out)
            fence_async_shared()  # generic-proxy smem writes -> visible to the TMA (async proxy)
            tma.async_copy_shared_to_global(c_desc, [off_m, off_n], c_smem)
            tma.store_wait(pendings=0)
        else:
            offs_n = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, mma))
            ptrs = c_ptr + gl.expand_dims(offs_m.to(gl.int64) * N, 1) + gl.expand_dims(offs_n, 0)
            mask = gl.expand_dims(m_mask, 1) & gl.expand_dims(offs_n < N, 0)
            gl.store(ptrs, out, mask=mask)


@functools.lru_cache(maxsize=None)
def _smem_layouts(block_m: int, block_n: int):
    a_l = gl.NVMMASharedLayout.get_default_for([block_m, _BLOCK_K], gl.float8e4nv)
    b_l = gl.NVMMASharedLayout.get_default_for([block_n, _BLOCK_K], gl.float8e4nv)
    c_l = gl.NVMMASharedLayout.get_default_for([block_m, block_n], gl.bfloat16)
    return a_l, b_l, c_l


def _scale_arg(s: torch.Tensor):
    """(tensor the kernel reads, is_e8m0): UE8M0 scales travel as their uint8 bytes."""
    if s.dtype == torch.float8_e8m0fnu:
        return s.view(torch.uint8), True
    return s, s.dtype == torch.uint8


def fp8_gemm_gluon(a: torch.Tensor, a_s: torch.Tensor, b: torch.Tensor, b_s: torch.Tensor, *, block_m: int = 128,
                   block_n: int = 128, stages: int = 4, group_m: int = 16, num_warps: int = 8) -> torch.Tensor:
    """``C = A @ B^T`` (bf16 ``[M, N]``) with the Gluon async-wgmma kernel (sm_90+).

    a: e4m3 ``[M, K]``, a_s: ``[M, K/128]``; b: e4m3 ``[N, K]``, b_s: ``[ceil(N/128), K/128]``.
    Scales fp32 or UE8M0 (``torch.float8_e8m0fnu``). Inputs are assumed validated: contiguous,
    16-byte aligned, K % 128 == 0, on one CUDA device. ``block_m`` must be 16 * ``num_warps``;
    ``block_n`` must divide 128."""
    m, k = a.shape
    n = b.shape[0]
    c = torch.empty((m, n), dtype=torch.bfloat16, device=a.device)
    if m == 0 or n == 0:
        return c
    a_s, as_e8m0 = _scale_arg(a_s)
    b_s, bs_e8m0 = _scale_arg(b_s)
    a_l, b_l, c_l = _smem_layouts(block_m, block_n)
    a_desc = TensorDescriptor.from_tensor(a, [block_m, _BLOCK_K], a_l)
    b_desc = TensorDescriptor.from_tensor(b, [block_n, _BLOCK_K], b_l)
    # TMA store needs a 16-byte row pitch; otherwise the kernel stores with masks.
    tma_store = n % 8 == 0 and c.data_ptr() % 16 == 0
    c_desc = TensorDescriptor.from_tensor(c, [block_m, block_n], c_l) if tma_store else None
    grid = (triton.cdiv(m, block_m) * triton.cdiv(n, block_n), )
    _fp8_gemm_gluon_kernel[grid](a_desc, a_s, b_desc, b_s, c, c_desc, m, n, k // _BLOCK_K, AS_E8M0=as_e8m0,
                                 BS_E8M0=bs_e8m0, TMA_STORE=tma_store, GROUP_M=group_m, NUM_STAGES=stages,
                                 num_warps=num_warps)
    return c
