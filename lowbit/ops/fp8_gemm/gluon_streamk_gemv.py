"""``fp8_gemm`` at decode sizes (M <= 64) as a **stream-K** weight stream on Hopper's FP8 wgmma (Gluon):
``C[M, N] bf16 = A[M, K] e4m3 (1x128 scales) @ B[N, K] e4m3 (128x128 scales)^T``.

Why: at M <= 64 the GEMM is a read of the N K weight bytes. The split-K GEMV
(``gluon_wgmma_gemv.py``) and the 64 x 64 prefill schedule give each CTA a whole row tile or a
fixed share of one, so a grid rarely matches the SMs: N2112 K7168 has 33 tiles of 64 rows, N7168
K16384 112 (20 of 132 SMs idle), N24576 K1536 384 (2.9 an SM). Here the grid is ``G`` persistent
CTAs (a multiple of the SM count) and the weight is cut into *units* of one row tile x one 128-wide
K block (``R`` x 128 bytes, R = 16 W rows); unit ``u`` is tile ``u // KB``, block ``u % KB``. CTA
``c`` streams units ``[c U / G, (c + 1) U / G)`` -- every CTA the same bytes within one unit --
through one TMA ring that never drains between tiles (the activation block of each unit rides on
the same mbarrier; it is L2-resident after the first CTA reads it).

A tile whose units all belong to one CTA is stored straight as bf16. A tile shared by several
CTAs (the ends of each CTA's range) is reduced in the same launch: each sharer stores its fp32
partial in its own workspace slot and the last to arrive at the tile's ``acq_rel`` counter adds
them all in CTA order (deterministic; all slots loaded at once, up to ``MAXC`` sharers). The end
tiles are streamed *first* -- the head of the CTA's last tile, then its first tile, then the
whole tiles -- so their reductions overlap the rest of the stream instead of waiting at its end.

Each unit is one ``wgmma.m64nNBk32`` chain from a zero accumulator (swap-AB: the weight tile is
the shared-memory A operand, the activations' [NB, 128] box the B operand), then one FFMA an
element by ``a_s[m, kb] * b_s[n / 128, kb]``, staged per unit in shared memory in the prologue.
Launched as a programmatic dependent launch: nothing global is touched before
``griddepcontrol.wait``. A 255 (NaN) UE8M0 scale byte makes its products NaN, as in the reference.

Gluon does not run under ``TRITON_INTERPRET``: the kernel is tested on the GPU tier
(tests/ops/test_fp8_streamk_gemv.py); ``scripts/fp8_streamk_gemv_offline.py`` compiles it for
sm_90 without a GPU.
"""
from __future__ import annotations

import functools

import torch
import triton

from lowbit._backend import sm_count
from lowbit.ops._arrival_counters import arrival_counters, counters_ready  # noqa: F401 - re-exported for the dispatch
from lowbit.ops._gluon_resident import resident_ctas

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

    from lowbit.ops._gluon_pdl import gdc_wait
    from lowbit.ops._gluon_wgmma import acc_layout
    from lowbit.ops.fp8_gemm.gluon import _e8m0_decode

    _GLUON_IMPORT_ERROR = None
except Exception as e:  # noqa: BLE001 - any failure means "no Gluon path"
    _GLUON_IMPORT_ERROR = e

__all__ = ["STREAMK_MAX_M", "fp8_streamk_gemv", "fp8_streamk_gemv_ok", "pick_fp8_streamk_config", "streamk_plan"]

#: most activation rows one launch serves (the wgmma's N)
STREAMK_MAX_M = 64

if _GLUON_IMPORT_ERROR is None:

    @gluon.jit
    def _unit_of(i, start, head_len, head0):
        """CTA-local step ``i`` (scalar or tensor) -> global unit: steps < head_len walk the head of
        the CTA's last tile (from unit head0), the rest its range from ``start`` on."""
        in_head = (i < head_len).to(gl.int32)
        return start + i - head_len + in_head * (head0 - start + head_len)

    @gluon.jit
    def _issue_unit(w_desc, x_desc, w_bufs, x_bufs, bars, i, start, head_len, head0, KB, R: gl.constexpr,
                    STAGES: gl.constexpr, pred):
        """TMA of the CTA's step i (weight box [R, 128] of its unit, activation box [NB, 128] of
        the unit's K block) into ring slot i % STAGES, both on the slot's mbarrier."""
        u = _unit_of(i, start, head_len, head0)
        tile = u // KB
        kb = u - tile * KB
        slot = i % STAGES
        bar = bars.index(slot)
        mbarrier.expect(bar, w_desc.block_type.nbytes + x_desc.block_type.nbytes, pred=pred)
        tma.async_copy_global_to_shared(w_desc, [tile * R, kb * 128], bar, w_bufs.index(slot), pred)
        tma.async_copy_global_to_shared(x_desc, [0, kb * 128], bar, x_bufs.index(slot), pred)

    @gluon.jit
    def _stage_unit_scales(sc_smem, as_ptr, bs_ptr, M, KB, start, head_len, head0, n_my, R: gl.constexpr,
                           PER: gl.constexpr, NB: gl.constexpr, W: gl.constexpr, AS_E8M0: gl.constexpr,
                           BS_E8M0: gl.constexpr):
        """``sc[i, m] = a_s[m, kb] * b_s[tile R / 128, kb]`` of the CTA's step i's unit (tile, kb),
        for i < n_my and m < M (else 0), into the [PER, NB] fp32 shared buffer."""
        sl: gl.constexpr = gl.BlockedLayout([1, 1], [4, 8], [W, 1], [1, 0])
        i = gl.expand_dims(gl.arange(0, PER, layout=gl.SliceLayout(1, sl)), 1)
        m = gl.expand_dims(gl.arange(0, NB, layout=gl.SliceLayout(0, sl)), 0)
        u = _unit_of(i, start, head_len, head0)
        tile = u // KB
        kb = u - tile * KB
        bs_off = (tile * R // 128) * KB + kb
        ok = (i < n_my) & (m < M)
        if AS_E8M0:
            sa = _e8m0_decode(gl.load(as_ptr + m * KB + kb, mask=ok, other=127).to(gl.int32))
        else:
            sa = gl.load(as_ptr + m * KB + kb, mask=ok, other=1.0)
        if BS_E8M0:
            sb = _e8m0_decode(gl.load(bs_ptr + bs_off, mask=i < n_my, other=127).to(gl.int32))
        else:
            sb = gl.load(bs_ptr + bs_off, mask=i < n_my, other=1.0)
        sc_smem.store(gl.where(ok, sa * sb, 0.0))

    @gluon.jit
    def _first_unit(c, U, G):
        """First unit of CTA c: the balanced split ``c U / G`` (int64: c U can pass 2^31)."""
        return (c.to(gl.int64) * U // G).to(gl.int32)

    @gluon.jit
    def _owner(u, U, G):
        """The CTA whose range holds unit u: the largest c with c U / G <= u."""
        return (((u + 1).to(gl.int64) * G - 1) // U).to(gl.int32)

    @gluon.jit
    def _flush_tile(acc, tile, lo, full, pid, t_a, c_ptr, ws_ptr, cnt_ptr, M, N, KB, U, G, R: gl.constexpr,
                    NB: gl.constexpr, MAXC: gl.constexpr, MODE: gl.constexpr, mma: gl.constexpr):
        """Store the CTA's fp32 sum over (part of) row tile ``tile`` (its units from ``lo`` on) as
        ``c[m, n]`` bf16: straight when the CTA had all the tile's units (``full``), else through
        the workspace ``ws`` fp32 [G, 2, NB, R] and the tile's int32 counter. Either way the sharers'
        partials are added in CTA order (deterministic, and the same sums in both modes).

        * MODE 0 (arrive): each sharer stores its partial (slot 0: the CTA's first tile ``t_a``,
          slot 1: its last) and increments the counter (``acq_rel``, waiting for the old value);
          the last to arrive adds all partials and resets the counter.
        * MODE 1 (spin): the sharer holding the tile's first unit reduces; the others store their
          partial in slot 0 (for them it is always ``t_a``) and publish it with a release increment
          they do not wait for. The reducer polls the counter (acquire) until all have arrived,
          then adds their partials to its own, still in registers. Waiting is safe only when every
          CTA of the grid is resident at once (the launcher checks) -- and it waits only on
          higher CTAs, which stream their piece of the tile first.
        * MODE 2: a probe of the reduction's cost only -- every piece is stored as if it were the
          whole tile (wrong sums)."""
        rl = gl.expand_dims(gl.arange(0, R, layout=gl.SliceLayout(1, mma)), 1)  # row within the tile
        cols = gl.expand_dims(gl.arange(0, NB, layout=gl.SliceLayout(0, mma)), 0)  # activation row m
        rows = tile * R + rl
        ok = (rows < N) & (cols < M)
        if MODE == 2:
            gl.store(c_ptr + cols * N + rows, acc.to(gl.bfloat16), mask=ok)
        elif full:
            gl.store(c_ptr + cols * N + rows, acc.to(gl.bfloat16), mask=ok)
        elif MODE == 1:
            c_last = _owner(tile * KB + KB - 1, U, G)
            if lo == tile * KB:  # the head: this CTA reduces
                seen = gl.atomic_add(cnt_ptr + tile, 0, sem="acquire", scope="gpu")
                while seen < c_last - pid:
                    seen = gl.atomic_add(cnt_ptr + tile, 0, sem="acquire", scope="gpu")
                tot = acc
                for j in gl.static_range(1, MAXC):
                    c = pid + j
                    tot = tot + gl.load(ws_ptr + (c * 2 * NB + cols) * R + rl, mask=ok & (c <= c_last), other=0.0,
                                        cache_modifier=".cg")
                gl.store(c_ptr + cols * N + rows, tot.to(gl.bfloat16), mask=ok)
                gl.store(cnt_ptr + tile, 0)
            else:
                gl.store(ws_ptr + (pid * 2 * NB + cols) * R + rl, acc)
                gl.thread_barrier()  # every thread's partial stored before the one release below
                gl.atomic_add(cnt_ptr + tile, 1, sem="release", scope="gpu")  # result unused: not waited for
        else:
            slot = (tile != t_a).to(gl.int32)
            gl.store(ws_ptr + ((pid * 2 + slot) * NB + cols) * R + rl, acc)
            gl.thread_barrier()  # every thread's partial stored before the one release below
            c_first = _owner(tile * KB, U, G)
            c_last = _owner(tile * KB + KB - 1, U, G)
            arrived = gl.atomic_add(cnt_ptr + tile, 1, sem="acq_rel", scope="gpu")
            if arrived == c_last - c_first:
                tot = gl.zeros_like(acc)
                for j in gl.static_range(MAXC):
                    c = c_first + j
                    c_slot = (tile != _first_unit(c, U, G) // KB).to(gl.int32)
                    tot = tot + gl.load(ws_ptr + ((c * 2 + c_slot) * NB + cols) * R + rl, mask=ok & (c <= c_last),
                                        other=0.0, cache_modifier=".cg")
                gl.store(c_ptr + cols * N + rows, tot.to(gl.bfloat16), mask=ok)
                gl.store(cnt_ptr + tile, 0)

    @gluon.jit(do_not_specialize=["M", "KB", "TILES"])
    def _fp8_streamk_gemv_kernel(w_desc, x_desc, as_ptr, bs_ptr, c_ptr, ws_ptr, cnt_ptr, M, N, KB, TILES,
                                 NB: gl.constexpr, PER: gl.constexpr, STAGES: gl.constexpr, MAXC: gl.constexpr,
                                 AS_E8M0: gl.constexpr, BS_E8M0: gl.constexpr, W: gl.constexpr,
                                 MODE: gl.constexpr):
        """CTA ``pid`` of G: units [pid U / G, (pid + 1) U / G) of U = TILES KB, unit u = (row tile
        u // KB: weight rows R tile .. + R - 1, K block u % KB). ``w_desc``: TMA descriptor of the
        weight e4m3 [N, K], box [R, 128]; ``x_desc``: of the activations e4m3 [M, K], box [NB, 128];
        ``as_ptr``: [M, KB] fp32 (or UE8M0 bytes); ``bs_ptr``: [ceil(N / 128), KB] fp32 (or UE8M0
        bytes); ``c_ptr``: bf16 [M, N]; ``ws_ptr``: fp32 [G, 2, NB, R]; ``cnt_ptr``: int32 [TILES]
        arrival counters (zero between launches). PER: the most units a CTA has, rounded up to a
        power of two (the staged scales' rows); MAXC: the most CTAs sharing one tile; MODE: how
        shared tiles are reduced (``_flush_tile``; the head-first order is MODE 0's)."""
        R: gl.constexpr = 16 * W
        mma: gl.constexpr = acc_layout(NB, W)
        col_l: gl.constexpr = gl.SliceLayout(0, mma)

        pid = gl.program_id(0)
        G = gl.num_programs(0)
        U = TILES * KB
        start = _first_unit(pid, U, G)
        end = _first_unit(pid + 1, U, G)
        n_my = end - start
        t_a = start // KB  # first and last tile the CTA touches
        t_b = (end - 1) // KB
        # MODE 0: the head of the last tile goes first when it is a shared piece of a tile other
        # than t_a (its reduction then overlaps the rest of the stream); MODE 1 keeps the natural
        # order, so a reducer's partners have published long before it needs them
        if MODE == 0:
            has_head = ((t_b != t_a) & (end - t_b * KB != KB)).to(gl.int32)
        else:
            has_head = t_a * 0
        head0 = t_b * KB
        head_len = has_head * (end - head0)

        w_bufs = gl.allocate_shared_memory(gl.float8e4nv, [STAGES, R, 128], w_desc.layout)
        x_bufs = gl.allocate_shared_memory(gl.float8e4nv, [STAGES, NB, 128], x_desc.layout)
        sc_smem = gl.allocate_shared_memory(gl.float32, [PER, NB], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
        # the same bytes with a rank-1 order: row i as a [NB] vector (``index`` drops the first dim)
        sc_rows = sc_smem._reinterpret(gl.float32, [PER, NB], gl.SwizzledSharedLayout(1, 1, 1, [0]))
        bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for s in gl.static_range(STAGES):
            mbarrier.init(bars.index(s), count=1)
        fence_async_shared()  # barrier inits visible to the TMA unit before the first copy
        gdc_wait()  # PDL: the previous kernel's writes (activations, maybe weights) are visible

        for s in gl.static_range(STAGES):
            _issue_unit(w_desc, x_desc, w_bufs, x_bufs, bars, s, start, head_len, head0, KB, R, STAGES, s < n_my)
        _stage_unit_scales(sc_smem, as_ptr, bs_ptr, M, KB, start, head_len, head0, n_my, R, PER, NB, W, AS_E8M0,
                           BS_E8M0)
        gl.thread_barrier()  # the scales' stores before any warp reads them

        zero = gl.zeros([R, NB], gl.float32, mma)
        i = 0
        for q in range(0, t_b - t_a + 1):  # one row tile a pass: the head piece first, then t_a, t_a + 1, ...
            first = (q == 0).to(gl.int32)
            tile = t_a + q - has_head + has_head * first * (t_b - t_a + 1)
            lo = gl.maximum(start, tile * KB)
            hi = gl.minimum(end, tile * KB + KB)
            acc = gl.zeros([R, NB], gl.float32, mma)
            for _ in range(lo, hi):
                slot = i % STAGES
                mbarrier.wait(bars.index(slot), (i // STAGES) & 1)
                d = warpgroup_mma(w_bufs.index(slot), x_bufs.index(slot).permute((1, 0)), zero, use_acc=False,
                                  is_async=True)
                d = warpgroup_mma_wait(num_outstanding=0, deps=(d, ))
                gl.thread_barrier()  # every warpgroup is done with the slot before it is refilled
                _issue_unit(w_desc, x_desc, w_bufs, x_bufs, bars, i + STAGES, start, head_len, head0, KB, R, STAGES,
                            i + STAGES < n_my)
                acc = acc + d * gl.expand_dims(sc_rows.index(i).load(col_l), 0)
                i += 1
            full = (lo == tile * KB) & (hi == tile * KB + KB)
            _flush_tile(acc, tile, lo, full, pid, t_a, c_ptr, ws_ptr, cnt_ptr, M, N, KB, U, G, R, NB, MAXC, MODE, mma)
        for s in gl.static_range(STAGES):
            mbarrier.invalidate(bars.index(s))


def streamk_plan(n: int, k: int, w: int, grid: int) -> dict:
    """Host-side plan of a stream-K launch: row tiles, units, the CTAs (at most one a unit), the
    most units a CTA has (``per``) and the most CTAs sharing a tile (``maxc``)."""
    kb = k // 128
    tiles = -(-n // (16 * w))
    units = tiles * kb
    g = max(1, min(grid, units))
    starts = [c * units // g for c in range(g + 1)]
    per = max(starts[c + 1] - starts[c] for c in range(g))
    maxc = max(((t + 1) * kb * g - 1) // units - ((t * kb + 1) * g - 1) // units + 1 for t in range(tiles))
    return dict(tiles=tiles, units=units, grid=g, per=per, maxc=maxc)


#: (CTAs an SM, STAGES, W) per activation box rows NB: measured in scripts/bench_fp8_streamk_gemv.py
STREAMK_CONFIG = {8: (2, 6, 4), 16: (2, 6, 4), 32: (2, 4, 4), 64: (1, 8, 4)}


#: how shared tiles are reduced by default (``_flush_tile``): 0 the last CTA to arrive, 1 the tile's
#: first CTA polling its partners' counter (the whole grid resident)
MODE = 0
#: shared memory a CTA may use (ring + staged scales; sm_90 allows 227 KB, the compiler adds a little)
SMEM_LIMIT = 200 * 1024


def pick_fp8_streamk_config(m: int) -> tuple[int, int, int]:
    """(CTAs an SM, STAGES, W) for M activation rows (``STREAMK_CONFIG`` by the box rows NB)."""
    return STREAMK_CONFIG[_nb(m)]


def _nb(m: int) -> int:
    return max(8, triton.next_power_of_2(m))


def fp8_streamk_gemv_ok(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether :func:`fp8_streamk_gemv` can run these operands: Gluon importable, CUDA sm_90,
    1 <= M <= 64, contiguous 16-byte aligned a and b."""
    if _GLUON_IMPORT_ERROR is not None or not a.is_cuda:
        return False
    if not 1 <= a.shape[0] <= STREAMK_MAX_M or a.shape[1] % 128:
        return False
    if any(t.data_ptr() % 16 or not t.is_contiguous() for t in (a, b)):
        return False
    return torch.cuda.get_device_capability(a.device) == (9, 0)


@functools.cache
def _box_layouts(rows: int, nb: int):
    """Shared layouts of the TMA boxes (weights [rows, 128], activations [nb, 128]; 128-byte
    swizzle, what the wgmma reads), built once per shape."""
    return (gl.NVMMASharedLayout.get_default_for([rows, 128], gl.float8e4nv),
            gl.NVMMASharedLayout.get_default_for([nb, 128], gl.float8e4nv))


def fp8_streamk_gemv(a: torch.Tensor, a_s: torch.Tensor, b: torch.Tensor, b_s: torch.Tensor,
                     config: tuple[int, int, int] | None = None, out: torch.Tensor | None = None,
                     pdl: bool = True, grid: int | None = None, mode: int | None = None) -> torch.Tensor:
    """a e4m3 [M, K] (1 <= M <= 64, K % 128 == 0, contiguous), a_s [M, K/128]; b e4m3 [N, K]
    (contiguous), b_s [ceil(N/128), K/128]; scales fp32 or float8_e8m0fnu. Returns bf16 [M, N]
    (``out`` if given).
    ``config`` = (CTAs an SM, STAGES, W) overrides :func:`pick_fp8_streamk_config` (W: 4, 8 or 16
    warps, 16 W weight rows a unit). ``pdl``: launch as a programmatic dependent launch; ``grid``
    overrides the CTA count (CTAs an SM x SMs; tests use it to make many CTAs share a tile);
    ``mode`` how shared tiles are reduced (``MODE``; 0: the last to arrive, 1: the tile's first
    CTA, polling -- a ValueError unless the whole grid is resident at once; 2: a timing probe with
    wrong sums).
    Launches share a per-device counter buffer: do not run two of them concurrently on different
    streams."""
    if _GLUON_IMPORT_ERROR is not None:
        raise RuntimeError(f"fp8_streamk_gemv needs triton.experimental.gluon: {_GLUON_IMPORT_ERROR}")
    m, k = a.shape
    n = b.shape[0]
    kb = k // 128
    if not 1 <= m <= STREAMK_MAX_M or k % 128:
        raise ValueError(f"fp8_streamk_gemv serves 1 <= M <= {STREAMK_MAX_M} and K % 128 == 0, "
                         f"got a of shape {tuple(a.shape)}")
    if b.shape != (n, k) or a_s.shape != (m, kb) or b_s.shape != (-(-n // 128), kb):
        raise ValueError(f"fp8_streamk_gemv needs b [N, K], a_s [M, K/128] and b_s [ceil(N/128), K/128] for "
                         f"a {tuple(a.shape)}, got b {tuple(b.shape)}, a_s {tuple(a_s.shape)}, b_s {tuple(b_s.shape)}")
    bad = [name for name, t in (("a", a), ("a_s", a_s), ("b", b), ("b_s", b_s)) if not t.is_contiguous()]
    if bad:
        raise ValueError(f"fp8_streamk_gemv needs contiguous operands, got non-contiguous {', '.join(bad)}")
    per_sm, stages, w = tuple(config) if config is not None else pick_fp8_streamk_config(m)
    if per_sm < 1 or stages < 1 or w not in (4, 8, 16):
        raise ValueError(f"fp8_streamk_gemv config (CTAs an SM, STAGES, W) needs positive counts and W in (4, 8, 16), "
                         f"got {config}")
    mode = MODE if mode is None else mode
    if mode not in (0, 1, 2):
        raise ValueError(f"fp8_streamk_gemv mode must be 0, 1 or 2, got {mode}")
    if out is not None and (out.shape != (m, n) or out.dtype != torch.bfloat16 or not out.is_contiguous()
                            or out.device != a.device):
        raise ValueError(f"fp8_streamk_gemv out must be a contiguous bf16 [{m}, {n}] tensor on {a.device}, got "
                         f"{out.dtype} {tuple(out.shape)} on {out.device}")
    nb = _nb(m)
    rows = 16 * w
    plan = _plan(n, k, w, grid if grid is not None else per_sm * sm_count(a.device, interpret=132))
    smem = stages * (rows + nb) * 128 + triton.next_power_of_2(plan["per"]) * nb * 4
    if smem > SMEM_LIMIT:
        raise ValueError(f"fp8_streamk_gemv: {plan['per']} units a CTA with a ring of {stages} need {smem} B of "
                         f"shared memory (> {SMEM_LIMIT}); use more CTAs or fewer stages")
    c = torch.empty(m, n, dtype=torch.bfloat16, device=a.device) if out is None else out
    w_layout, x_layout = _box_layouts(rows, nb)
    w_desc = TensorDescriptor.from_tensor(b, [rows, 128], w_layout)
    x_desc = TensorDescriptor.from_tensor(a, [nb, 128], x_layout)
    ws = torch.empty(plan["grid"], 2, nb, rows, dtype=torch.float32, device=a.device)
    cnt = arrival_counters(a.device, plan["tiles"], "fp8_streamk_gemv")
    as_e8m0 = a_s.dtype == torch.float8_e8m0fnu
    bs_e8m0 = b_s.dtype == torch.float8_e8m0fnu
    # MAXC rounded up to a power of two: fewer compiled variants (extra sharers are masked off)
    meta = dict(NB=nb, PER=triton.next_power_of_2(plan["per"]), STAGES=min(stages, plan["per"]),
                MAXC=triton.next_power_of_2(plan["maxc"]),
                AS_E8M0=as_e8m0, BS_E8M0=bs_e8m0, W=w, MODE=mode, num_warps=w)
    if pdl:
        meta["launch_pdl"] = True
    args = (w_desc, x_desc, a_s.view(torch.uint8) if as_e8m0 else a_s, b_s.view(torch.uint8) if bs_e8m0 else b_s, c,
            ws, cnt, m, n, kb, plan["tiles"])
    if mode == 1 and plan["grid"] > resident_ctas(_fp8_streamk_gemv_kernel, a.device, args, meta, w):
        raise ValueError(f"fp8_streamk_gemv mode 1 needs every CTA resident: {plan['grid']} CTAs of config "
                         f"{(per_sm, stages, w)} do not fit")
    _fp8_streamk_gemv_kernel[(plan["grid"],)](*args, **meta)
    return c


@functools.lru_cache(maxsize=256)
def _plan(n: int, k: int, w: int, grid: int) -> dict:
    return streamk_plan(n, k, w, grid)
