"""``fp4_gemm`` at decode sizes (M <= 16) on Hopper's FP8 wgmma, weights decoded in registers
(Gluon): ``C[M, N] bf16 = A[M, K] e4m3 (1x128 scales) @ dequant(B[N, K/2] E2M1, UE8M0 1x32)^T``.

Why: the ``mma.sync`` GEMV (``lowbit/ops/fp8_gemm/triton_mma.py``) spends most of its issue slots
per 16 x 128 weight tile on work that is not the weight stream itself: at M = 16 every row tile
re-loads and re-converts the activations (their B fragments: 8 loads, 32 F2FP and 16 PRMT a
tile), and sm_90's fp16 ``HMMA`` needs every operand converted. Here:

* the weight tiles arrive by **TMA** (no LSU instructions, no registers while in flight;
  ``STAGES`` stages of four K blocks ahead);
* each warp reads its A fragments with one ``ldmatrix`` (``LDSM.16.M88.2``) per 32-wide group --
  rows g and g + 8 of the warp's 16-row slab, the 4 bytes ``16 s + 4 t`` of group s: exactly the
  words the register A operand of ``wgmma.m64nNk32.e4m3`` holds (``DotOperandLayout(0, k_width=4)``)
  -- and decodes them to E4M3 by shifts and masks (an E2M1 code ``s e1 e0 m`` is the E4M3 byte
  ``s 0 0 e1 e0 m 0 0``, its value times 2^-6; about 3.5 integer ops an output word, no PRMT);
* the activations are the wgmma's **B operand in shared memory**, staged once per stage per CTA
  and shared by all 64 rows of the tile: no per-row-tile loads or conversions.

K order: the low nibbles of a word become the wgmma's k ``4t..4t+3`` and the high nibbles k
``16 + 4t..``, so inside every 32-wide group the wgmma's k = 16 h + 4 t + i carries the weight's
k = 8 t + 2 i + h. The activations are stored in the same order: each group's 32 bytes as its 16
even-indexed bytes, then its 16 odd ones (two ``prmt`` per 8 bytes while staging).

Scales: one wgmma per group (K = 32 = one UE8M0 group) from a zero accumulator; the block's sum
is ``sum_s 2^(e_s - 127) d_s`` (per weight row = per accumulator row), then times the activation
scale of its column (two-level accumulation as in ``triton_mma``). A 255 scale byte makes the
whole output row NaN (the reference's rule).

Parallelism: a CTA is one warpgroup and 64 weight rows; ``SPLIT`` CTAs split the K stages of a
row tile so that small N still fills the GPU. With SPLIT > 1 each CTA writes its fp32 partial to
a workspace, and the last CTA of a row tile to arrive (an ``acq_rel`` arrival counter, reset by
that CTA for the next launch or graph replay) adds the partials in split order and writes bf16:
one launch, deterministic.

Gluon does not run under ``TRITON_INTERPRET``: this kernel is tested on the GPU tier
(tests/ops/test_fp4_wgmma_gemv.py); ``scripts/fp4_wgmma_gemv_offline.py`` compiles it for sm_90
without a GPU.
"""
from __future__ import annotations

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
        warpgroup_mma_wait,
    )
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    _GLUON_IMPORT_ERROR = None
except Exception as e:  # noqa: BLE001 - any failure means "no Gluon path"
    _GLUON_IMPORT_ERROR = e

__all__ = ["WGMMA_GEMV_MAX_M", "fp4_wgmma_gemv", "fp4_wgmma_gemv_ok", "pick_wgmma_gemv_config"]

#: most activation rows one launch serves (the wgmma's N: 8 up to M = 8, else 16)
WGMMA_GEMV_MAX_M = 16
_ROWS = 64  # weight rows per CTA: one wgmma M
_STAGE_K = 512  # K per pipeline stage: four 128-wide blocks (two [64, 128 B] weight boxes, one [64, 16 B] scale box)
#: what the result is multiplied by: the decoded weights are E2M1 x 2^-6
_RESULT_SCALE = 64.0

if _GLUON_IMPORT_ERROR is None:
    # E2M1 nibbles -> E4M3 bytes (x 2^-6): low nibbles (k even) and high nibbles (k odd) of a word
    _DEC_LO = gl.constexpr("{.reg .b32 a, b; shl.b32 a, $1, 2; and.b32 a, a, 0x1C1C1C1C; shl.b32 b, $1, 4; "
                           "and.b32 b, b, 0x80808080; or.b32 $0, a, b;}")
    _DEC_HI = gl.constexpr("{.reg .b32 a; shr.u32 a, $1, 2; and.b32 a, a, 0x1C1C1C1C; and.b32 $0, $1, 0x80808080; "
                           "or.b32 $0, $0, a;}")
    # 8 activation bytes -> (bytes 0, 2, 4, 6), (bytes 1, 3, 5, 7)
    _EVEN_ODD = gl.constexpr("{prmt.b32 $0, $2, $3, 0x6420; prmt.b32 $1, $2, $3, 0x7531;}")
    _EXP_BITS = gl.constexpr(0x7F800000)
    _F32_2M127 = gl.constexpr(0x00400000)  # 2^-127, the subnormal UE8M0 byte 0 stands for
    _SIGN = gl.constexpr(-0x7F7F7F80)  # 0x80808080 as int32
    _RESULT = gl.constexpr(_RESULT_SCALE)

    @gluon.constexpr_function
    def _acc_layout(NB):
        return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, NB, 32])

    @gluon.constexpr_function
    def _codes_layout():
        """uint8 [64, 16] (row, byte of a group): lane (g, t) of warp w holds bytes 4t..4t+3 of rows
        16w + g and 16w + g + 8 -- the fragment words ``ldmatrix`` hands out."""
        return gl.DistributedLinearLayout(reg_bases=[[0, 1], [0, 2], [8, 0]],
                                          lane_bases=[[0, 4], [0, 8], [1, 0], [2, 0], [4, 0]],
                                          warp_bases=[[16, 0], [32, 0]], block_bases=[], shape=[64, 16])

    @gluon.constexpr_function
    def _scale_layout():
        """int32 [64, 4] (row, K block of the stage): every lane of row g holds the row's 4 scale
        words (rows 16w + g and + 8), so block b's word is a register."""
        return gl.DistributedLinearLayout(reg_bases=[[0, 1], [0, 2], [8, 0]],
                                          lane_bases=[[0, 0], [0, 0], [1, 0], [2, 0], [4, 0]],
                                          warp_bases=[[16, 0], [32, 0]], block_bases=[], shape=[64, 4])

    @gluon.constexpr_function
    def _act_scale_layout(NB):
        """[NB, 4] (activation row, K block of the stage): the columns a lane's accumulator holds
        (2t, 2t + 1, + 8), the 4 blocks in registers (one 16-byte load per column)."""
        reg = [[0, 1], [0, 2], [1, 0]]
        if NB == 16:
            reg = reg + [[8, 0]]
        return gl.DistributedLinearLayout(reg_bases=reg, lane_bases=[[2, 0], [4, 0], [0, 0], [0, 0], [0, 0]],
                                          warp_bases=[[0, 0], [0, 0]], block_bases=[], shape=[NB, 4])

    @gluon.constexpr_function
    def _x_layout(NB):
        """int32 [NB, 16, 8] (activation row, group of the stage, word): one lane a group row."""
        return gl.BlockedLayout([1, 1, 8], [2, 16, 1], [4, 1, 1], [2, 1, 0])

    @gluon.jit
    def _four(v):
        """[R, 4] -> its 4 columns ([R] each), in order."""
        a, b = gl.split(gl.reshape(v, [v.shape[0], 2, 2]))  # a: columns 0, 2; b: 1, 3
        c0, c2 = gl.split(a)
        c1, c3 = gl.split(b)
        return c0, c1, c2, c3

    @gluon.jit
    def _scale_of(v, SHIFT: gl.constexpr):
        """Byte SHIFT/8 of the UE8M0 words ``v`` as fp32 2^(e - 127) (byte 0 -> 2^-127, 255 -> inf;
        the 255 rows are made NaN at the end)."""
        if SHIFT >= 0:
            e = (v << SHIFT) & _EXP_BITS
        else:
            e = (v >> (-SHIFT)) & _EXP_BITS
        return gl.maximum(e, _F32_2M127).to(gl.float32, bitcast=True)

    @gluon.jit
    def _load_x(a_ptr, M, K: gl.constexpr, stage, NB: gl.constexpr):
        """Stage ``stage``'s activation words int32 [NB, 16 groups, 8 words] (as stored: the
        byte permutation happens in :func:`_store_x`); rows >= M and columns >= K read as 0.
        Words, not bytes: a loop-carried uint8 tensor would hold a register per byte."""
        xl: gl.constexpr = _x_layout(NB)
        r = gl.arange(0, NB, layout=gl.SliceLayout(1, gl.SliceLayout(2, xl)))
        g = gl.arange(0, 16, layout=gl.SliceLayout(0, gl.SliceLayout(2, xl)))
        c = gl.arange(0, 8, layout=gl.SliceLayout(0, gl.SliceLayout(1, xl)))
        r3 = gl.expand_dims(gl.expand_dims(r, 1), 2)
        col = stage * 128 + gl.expand_dims(gl.expand_dims(g, 0), 2) * 8 + gl.expand_dims(gl.expand_dims(c, 0), 1)
        return gl.load(a_ptr + r3 * (K // 4) + col, mask=(r3 < M) & (col < K // 4), other=0)

    @gluon.jit
    def _store_x(x_buf, raw, NB: gl.constexpr):
        """Permute raw activation words [NB, 16, 8] to wgmma k order (per group: the even bytes,
        then the odd ones) and store them as the 16 [NB, 32] B tiles of one stage (an int32 view)."""
        lo, hi = gl.split(gl.reshape(raw, [NB, 16, 4, 2]))  # the 4 byte-octets of a group as word pairs
        ev, od = gl.inline_asm_elementwise(_EVEN_ODD, "=r,=r,r,r", [lo, hi], dtype=(gl.int32, gl.int32),
                                           is_pure=True, pack=1)
        p = gl.reshape(gl.permute(gl.join(ev, od), (0, 1, 3, 2)), [NB, 16, 8])  # [ev0..ev3, od0..od3]
        x_buf.store(gl.permute(p, (1, 0, 2)))

    @gluon.jit
    def _issue_stage(w_desc, s_desc, w_bufs, s_bufs, bars, j, j0, row0, STAGES: gl.constexpr, pred):
        """TMA of this CTA's stage j (global stage j0 + j) into ring slot j % STAGES."""
        slot = j % STAGES
        bar = bars.index(slot)
        mbarrier.expect(bar, 2 * w_desc.block_type.nbytes + s_desc.block_type.nbytes, pred=pred)
        col = (j0 + j) * 256  # packed bytes of the stage's first code
        tma.async_copy_global_to_shared(w_desc, [row0, col], bar, w_bufs.index(2 * slot), pred)
        tma.async_copy_global_to_shared(w_desc, [row0, col + 128], bar, w_bufs.index(2 * slot + 1), pred)
        tma.async_copy_global_to_shared(s_desc, [row0, (j0 + j) * 16], bar, s_bufs.index(slot), pred)

    @gluon.jit
    def _act_scales(as_ptr, M, KB: gl.constexpr, stage, NB: gl.constexpr, AS_E8M0: gl.constexpr):
        """fp32 [NB, 4]: the activation scales of the stage's 4 K blocks (rows >= M: 0)."""
        sl: gl.constexpr = _act_scale_layout(NB)
        r = gl.expand_dims(gl.arange(0, NB, layout=gl.SliceLayout(1, sl)), 1)
        b = gl.expand_dims(gl.arange(0, 4, layout=gl.SliceLayout(0, sl)), 0)
        kb = stage * 4 + b
        m = (r < M) & (kb < KB)
        if AS_E8M0:
            e = gl.load(as_ptr + r * KB + kb, mask=m, other=0).to(gl.int32)
            s = gl.where(e == 255, float("nan"), gl.maximum(e << 23, _F32_2M127).to(gl.float32, bitcast=True))
            s = gl.where(m, s, 0.0)
        else:
            s = gl.load(as_ptr + r * KB + kb, mask=m, other=0.0)
        return s

    @gluon.jit
    def _stage_sum(acc, flags, w_bufs, s_bufs, x_bufs, slot, xb, sa, NB: gl.constexpr):
        """acc += the 4 K blocks of one stage (weights in ring slot ``slot``, activations in x
        buffer ``xb``, activation scales ``sa`` [NB, 4])."""
        mma: gl.constexpr = _acc_layout(NB)
        a_l: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=4)
        row_l: gl.constexpr = gl.SliceLayout(1, mma)
        col_l: gl.constexpr = gl.SliceLayout(0, mma)
        sw = s_bufs.index(slot)._reinterpret(gl.int32, [64, 4], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
        sw = sw.load(_scale_layout())
        zero = gl.zeros([64, NB], gl.float32, mma)
        v_blocks = _four(sw)
        sa_blocks = _four(sa)
        for b in gl.static_range(4):
            wb = w_bufs.index(2 * slot + b // 2)
            d = ()
            for s in gl.static_range(4):
                q = wb.slice(64 * (b % 2) + 16 * s, 16, dim=1).load(_codes_layout())
                lo = gl.inline_asm_elementwise(_DEC_LO, "=r,r", [q], dtype=gl.float8e4nv, is_pure=True, pack=4)
                hi = gl.inline_asm_elementwise(_DEC_HI, "=r,r", [q], dtype=gl.float8e4nv, is_pure=True, pack=4)
                a = gl.reshape(gl.permute(gl.join(lo, hi), (0, 2, 1)), [64, 32])
                a = gl.convert_layout(a, a_l, assert_trivial=True)
                d = d + (warpgroup_mma(a, x_bufs.index(16 * xb + 4 * b + s).permute((1, 0)), zero, use_acc=False,
                                       is_async=True),)
            d = warpgroup_mma_wait(num_outstanding=0, deps=d)
            v = gl.convert_layout(v_blocks[b], row_l, assert_trivial=True)
            blk = d[0] * gl.expand_dims(_scale_of(v, 23), 1)
            blk = blk + d[1] * gl.expand_dims(_scale_of(v, 15), 1)
            blk = blk + d[2] * gl.expand_dims(_scale_of(v, 7), 1)
            blk = blk + d[3] * gl.expand_dims(_scale_of(v, -1), 1)
            acc = acc + blk * gl.expand_dims(gl.convert_layout(sa_blocks[b], col_l, assert_trivial=True), 0)
            flags = flags | ((~v - 0x01010101) & v & _SIGN)  # bit 8i + 7 set where scale byte i is 255
        return acc, flags

    @gluon.jit(do_not_specialize=["M", "n_stages", "per_split"])
    def _fp4_wgmma_gemv_kernel(w_desc, s_desc, a_ptr, as_ptr, c_ptr, ws_ptr, cnt_ptr, M, N, n_stages, per_split,
                               K: gl.constexpr, NB: gl.constexpr, STAGES: gl.constexpr, SPLIT: gl.constexpr,
                               AS_E8M0: gl.constexpr):
        """Program (row tile, split): weight rows 64 p .. 64 p + 63, stages [split * per_split,
        min(+ per_split, n_stages)). ``w_desc``: TMA descriptor of the packed weight uint8 [N, K/2],
        box [64, 128]; ``s_desc``: of its UE8M0 scales uint8 [N, K/32], box [64, 16]; ``a_ptr``:
        e4m3 activations as int32 words [M, K/4]; ``as_ptr``: [M, K/128] fp32 (or UE8M0 bytes); ``c_ptr``:
        bf16 [M, N]; ``ws_ptr``: fp32 [SPLIT, NB, N] partials and ``cnt_ptr``: int32 [N / 64]
        arrival counters (zero between launches; SPLIT > 1 only)."""
        KB: gl.constexpr = K // 128
        mma: gl.constexpr = _acc_layout(NB)
        row_l: gl.constexpr = gl.SliceLayout(1, mma)
        col_l: gl.constexpr = gl.SliceLayout(0, mma)
        x_sl: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=32, element_bitwidth=8, rank=3)
        x_sl2: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=32, element_bitwidth=8, rank=2)
        x_sl32: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=32, element_bitwidth=32, rank=3)

        pid_n = gl.program_id(0)
        pid_k = gl.program_id(1)
        row0 = pid_n * 64
        j0 = pid_k * per_split
        n_my = gl.minimum(per_split, n_stages - j0)

        w_bufs = gl.allocate_shared_memory(gl.uint8, [2 * STAGES, 64, 128], w_desc.layout)
        s_bufs = gl.allocate_shared_memory(gl.uint8, [STAGES, 64, 16], s_desc.layout)
        # two x buffers of 16 [NB, 32] B tiles: stored a buffer at a time ([16, NB, 32] views of
        # rank 3), read a tile at a time (rank-2 views of the same bytes)
        x_store = gl.allocate_shared_memory(gl.float8e4nv, [2, 16, NB, 32], x_sl)
        x_bufs = x_store._reinterpret(gl.float8e4nv, [32, NB, 32], x_sl2)
        x_words = x_store._reinterpret(gl.int32, [2, 16, NB, 8], x_sl32)
        bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(STAGES):
            mbarrier.init(bars.index(i), count=1)
        fence_async_shared()  # barrier inits visible to the TMA unit before the first copy

        for j in gl.static_range(STAGES - 1):
            _issue_stage(w_desc, s_desc, w_bufs, s_bufs, bars, j, j0, row0, STAGES, j < n_my)
        # stage 0's activations into x buffer 0; stage 1's in registers
        _store_x(x_words.index(0), _load_x(a_ptr, M, K, j0, NB), NB)
        fence_async_shared()
        gl.thread_barrier()
        x_next = _load_x(a_ptr, M, K, j0 + 1, NB)
        sa = _act_scales(as_ptr, M, KB, j0, NB, AS_E8M0)

        acc = gl.zeros([64, NB], gl.float32, mma)
        flags = gl.zeros([64], gl.int32, row_l)
        for j in range(0, n_my):
            # slot (j - 1) % STAGES was read by stage j - 1, which every thread has finished
            # (the barrier at the end of the previous iteration)
            _issue_stage(w_desc, s_desc, w_bufs, s_bufs, bars, j + STAGES - 1, j0, row0, STAGES,
                         j + STAGES - 1 < n_my)
            sa_next = _act_scales(as_ptr, M, KB, j0 + j + 1, NB, AS_E8M0)
            slot = j % STAGES
            mbarrier.wait(bars.index(slot), (j // STAGES) & 1)
            acc, flags = _stage_sum(acc, flags, w_bufs, s_bufs, x_bufs, slot, j % 2, sa, NB)
            sa = sa_next
            # stage j + 1's activations into the other x buffer (its readers, stage j - 1's
            # wgmmas, are retired), visible to the async proxy and to every warp
            _store_x(x_words.index((j + 1) % 2), x_next, NB)
            fence_async_shared()
            gl.thread_barrier()
            x_next = _load_x(a_ptr, M, K, j0 + j + 2, NB)
        for i in gl.static_range(STAGES):
            mbarrier.invalidate(bars.index(i))

        out = acc * _RESULT
        out = gl.where(gl.expand_dims(flags != 0, 1), float("nan"), out)
        rows = row0 + gl.expand_dims(gl.arange(0, 64, layout=row_l), 1)  # weight row n
        cols = gl.expand_dims(gl.arange(0, NB, layout=col_l), 0)  # activation row m
        ok = (rows < N) & (cols < M)
        if SPLIT == 1:
            gl.store(c_ptr + cols * N + rows, out.to(gl.bfloat16), mask=ok)
        else:
            gl.store(ws_ptr + (pid_k * NB + cols) * N + rows, out, mask=ok)
            # The barrier orders every thread's partial stores before the one atomic; its release
            # (gpu scope) publishes them, and the acquire of the last arrival makes all splits'
            # partials visible to it (read from L2 with .cg). That CTA resets the counter.
            gl.thread_barrier()
            arrived = gl.atomic_add(cnt_ptr + pid_n, 1, sem="acq_rel", scope="gpu")
            if arrived == SPLIT - 1:
                tot = gl.zeros([64, NB], gl.float32, mma)
                for sp in gl.static_range(SPLIT):
                    tot = tot + gl.load(ws_ptr + (sp * NB + cols) * N + rows, mask=ok, other=0.0,
                                        cache_modifier=".cg")
                gl.store(c_ptr + cols * N + rows, tot.to(gl.bfloat16), mask=ok)
                gl.store(cnt_ptr + pid_n, 0)


def pick_wgmma_gemv_config(n: int, k: int, m: int = 1) -> tuple[int, int]:
    """(STAGES, SPLIT): split the K stages so that the row tiles x splits fill the 132 SMs about
    twice (placeholder until the H200 sweep), and at least 2 stages per split."""
    tiles = -(-n // _ROWS)
    n_st = -(-k // _STAGE_K)
    split = 1
    while tiles * split < 264 and n_st // (2 * split) >= 2 and split < 8:
        split *= 2
    return 4, split


def fp4_wgmma_gemv_ok(a: torch.Tensor, b: torch.Tensor, b_s: torch.Tensor) -> bool:
    """Whether :func:`fp4_wgmma_gemv` can run these operands: Gluon importable, CUDA sm_90,
    1 <= M <= 16, K a multiple of 512 (the scale rows' TMA pitch), 16-byte aligned storage."""
    if _GLUON_IMPORT_ERROR is not None or not a.is_cuda:
        return False
    if not 1 <= a.shape[0] <= WGMMA_GEMV_MAX_M or a.shape[1] % _STAGE_K:
        return False
    if any(t.data_ptr() % 16 for t in (a, b, b_s)):
        return False
    return torch.cuda.get_device_capability(a.device) == (9, 0)


_COUNTERS: dict = {}


def _counters(device: torch.device, n_tiles: int) -> torch.Tensor:
    """Zeroed int32 arrival counters (each launch leaves them zero again), one set per device."""
    key = (device.type, device.index)
    c = _COUNTERS.get(key)
    if c is None or c.numel() < n_tiles:
        c = torch.zeros(max(n_tiles, 1024), dtype=torch.int32, device=device)
        _COUNTERS[key] = c
    return c


def fp4_wgmma_gemv(a: torch.Tensor, a_s: torch.Tensor, b: torch.Tensor, b_s: torch.Tensor,
                   config: tuple[int, int] | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """a e4m3 [M, K] (1 <= M <= 16, K % 512 == 0, contiguous), a_s [M, K/128] fp32 or
    float8_e8m0fnu (contiguous); b packed E2M1 uint8 [N, K/2] with UE8M0 uint8 b_s [N, K/32],
    contiguous. Returns bf16 [M, N] (``out`` if given). ``config`` = (STAGES, SPLIT) overrides
    :func:`pick_wgmma_gemv_config`. Launches with SPLIT > 1 share a per-device counter buffer:
    do not run two of them concurrently on different streams."""
    if _GLUON_IMPORT_ERROR is not None:
        raise RuntimeError(f"fp4_wgmma_gemv needs triton.experimental.gluon: {_GLUON_IMPORT_ERROR}")
    m, k = a.shape
    n = b.shape[0]
    if not 1 <= m <= WGMMA_GEMV_MAX_M or k % _STAGE_K:
        raise ValueError(f"fp4_wgmma_gemv serves 1 <= M <= {WGMMA_GEMV_MAX_M} and K % {_STAGE_K} == 0, "
                         f"got a of shape {tuple(a.shape)}")
    if b.shape != (n, k // 2) or b_s.shape != (n, k // 32):
        raise ValueError(f"fp4_wgmma_gemv needs b [N, K/2] and b_s [N, K/32] for K = {k}, got {tuple(b.shape)} "
                         f"and {tuple(b_s.shape)}")
    stages, split = config if config is not None else pick_wgmma_gemv_config(n, k, m)
    n_st = k // _STAGE_K
    if stages < 2 or split < 1:
        raise ValueError(f"fp4_wgmma_gemv config (STAGES, SPLIT) needs STAGES >= 2 and SPLIT >= 1, got {config}")
    per_split = -(-n_st // split)
    split = -(-n_st // per_split)  # no empty splits
    nb = 8 if m <= 8 else 16
    c = torch.empty(m, n, dtype=torch.bfloat16, device=a.device) if out is None else out
    b8 = b.view(torch.uint8)
    w_layout = gl.NVMMASharedLayout.get_default_for([_ROWS, 128], gl.uint8)
    s_layout = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=8, rank=2)
    w_desc = TensorDescriptor.from_tensor(b8, [_ROWS, 128], w_layout)
    s_desc = TensorDescriptor.from_tensor(b_s.view(torch.uint8), [_ROWS, 16], s_layout)
    tiles = triton.cdiv(n, _ROWS)
    if split > 1:
        ws = torch.empty(split, nb, n, dtype=torch.float32, device=a.device)
        cnt = _counters(a.device, tiles)
    else:
        ws = c
        cnt = c
    as_e8m0 = a_s.dtype == torch.float8_e8m0fnu
    _fp4_wgmma_gemv_kernel[(tiles, split)](
        w_desc, s_desc, a.view(torch.uint8).view(torch.int32), a_s.view(torch.uint8) if as_e8m0 else a_s, c, ws, cnt, m, n, n_st,
        per_split, k, NB=nb, STAGES=stages, SPLIT=split, AS_E8M0=as_e8m0, num_warps=4)
    return c
