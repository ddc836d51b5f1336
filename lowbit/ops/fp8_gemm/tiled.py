"""Triton kernels for ``fp8_gemm``: ``C = A @ B^T`` with 1x128 (A) and 128x128 (B) block scales.

Per 128-wide K block: one FP8 ``tl.dot`` (wgmma / QGMMA on sm_90), then ``acc += d * a_s * b_s``
in fp32 (two-level accumulation: the dot of each K block is scaled before it joins the sum).

Two kernels share the launcher :func:`launch_gemm`:

* ``_fp8_gemm_kernel`` (pointer loads, software-pipelined by Triton): every band, and the only one
  that runs under the interpreter. Decode (M <= 64) runs it "swap-AB": it computes the tile of
  ``C^T = B @ A^T`` so the weight rows fill the 64-row MMA dimension and the few activation rows
  sit in the narrow N dimension (wgmma allows N = 8..256), instead of padding M up to 64.
* ``_fp8_gemm_tma_kernel``: prefill tiles loaded by the Hopper tensor-memory accelerator (host
  ``TensorDescriptor``s; out-of-bounds rows arrive zero-filled), used when a config asks for it,
  the device is sm_90+ and the operands are 16-byte aligned.

Small grids are split along K (``SPLIT_K``): each split writes an fp32 partial tile and a second
tiny kernel sums them in a fixed order (deterministic; no atomics, no zero-fill).

:func:`fp8_gemm` dispatch on sm_90 (measured in docs/gemm.md): M <= 8 the ``mma.sync`` GEMV
(``triton_mma.py``); M in ``WGMMA_GEMV_M`` the TMA-fed wgmma GEMV (``gluon_wgmma_gemv.py``); M in
``DECODE_GLUON_M`` (or ``DECODE_GLUON_SHORT_M`` for a weight of at most
``triton_mma.SHORT_LAUNCH_BYTES``) with about one 64-row weight tile an SM, and M >= ``GLUON_MIN_M``, the Gluon
kernel of ``gluon.py``; everything else (and every other GPU, and the interpreter) the kernels
above.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from lowbit._backend import interpret_mode, sm_count
from lowbit.ops.act_quant.triton import _load_scale
from lowbit.ops.fp8_gemm import gluon_wgmma_gemv as _wgmma
from lowbit.ops.fp8_gemm import triton_mma as _mma


class GemmConfig(NamedTuple):
    """One launch configuration of the GEMM kernels."""

    block_m: int  # activation rows per program
    block_n: int  # weight rows per program
    warps: int
    stages: int
    swap_ab: bool  # compute C^T tiles (decode)
    group_m: int = 8  # row tiles that share a weight tile in L2 (grouped order)
    tma: bool = False  # fp8 non-swap only: TMA descriptor loads
    waves: int = 2  # split K until the grid has about waves x #SMs programs
    prefetch: bool = True  # load the next K block's scales one iteration ahead (see _fp8_scales)


@triton.jit
def tile_coords(M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """(i_m, i_n) of this program, grouped so GROUP_M row tiles share a weight tile in L2."""
    i_pid = tl.program_id(0)
    n_pm = tl.cdiv(M, BLOCK_M)
    n_pn = tl.cdiv(N, BLOCK_N)
    width = GROUP_M * n_pn
    first_m = (i_pid // width) * GROUP_M
    rows = tl.minimum(n_pm - first_m, GROUP_M)
    return (first_m + (i_pid % width) % rows).to(tl.int64), ((i_pid % width) // rows).to(tl.int64)


@triton.jit
def weight_tile_scale(bs_ptr, i_n, o_n, m_n, kb, n_kb, BLOCK_N: tl.constexpr, E8M0: tl.constexpr):
    """The 128x128 weight-block scale(s) of K block kb for this tile's weight rows: a scalar when
    BLOCK_N <= 128 (the tile lies inside one 128-row block), else one per row [BLOCK_N]."""
    if BLOCK_N <= 128:
        s = _load_scale(bs_ptr + (i_n * BLOCK_N // 128) * n_kb + kb, True, E8M0)
    else:
        s = _load_scale(bs_ptr + (o_n // 128) * n_kb + kb, m_n, E8M0)
    return s


@triton.jit
def scale_dot(acc, d, s_a, s_b, BLOCK_N: tl.constexpr, SWAP_AB: tl.constexpr):
    """acc + d * a_s * b_s (d is [BLOCK_N, BLOCK_M] under SWAP_AB); a scalar s_b folds into s_a, so
    the update is one FMA per element."""
    if BLOCK_N <= 128:
        if SWAP_AB:
            acc = acc + d * (s_a * s_b)[None, :]
        else:
            acc = acc + d * (s_a * s_b)[:, None]
    else:
        if SWAP_AB:
            acc = acc + (d * s_b[:, None]) * s_a[None, :]
        else:
            acc = acc + (d * s_a[:, None]) * s_b[None, :]
    return acc


@triton.jit
def _fp8_scales(kb, as_ptr, bs_ptr, i_n, o_m, o_n, m_m, m_n, n_kb,
                AS_E8M0: tl.constexpr, BS_E8M0: tl.constexpr, BLOCK_N: tl.constexpr):
    """(a_s [BLOCK_M], b_s scalar or [BLOCK_N]) of K block kb, clamped to the last block (the
    prefetch one past the end reloads it). The kernels call this one iteration ahead: Triton's
    pipeliner left these small loads in the loop (the SASS showed them issued right before their
    use; it does pipeline plain 4-byte-a-thread loads in other loops, so why not these was not
    checked), and issued at the top of the previous iteration their latency hides behind its dot
    instead of stalling the scale FMA."""
    kbc = tl.minimum(kb, n_kb - 1)
    s_a = _load_scale(as_ptr + o_m * n_kb + kbc, m_m, AS_E8M0)
    s_b = weight_tile_scale(bs_ptr, i_n, o_n, m_n, kbc, n_kb, BLOCK_N, BS_E8M0)
    return s_a, s_b


@triton.jit
def _fp8_step_scaled(acc, kb, s_a, s_b, a_ptr, b_ptr, o_m, o_n, m_m, m_n, K,
                     SWAP_AB: tl.constexpr, BLOCK_N: tl.constexpr):
    """acc += dot(A[:, kb], B[:, kb]^T) * s_a * s_b (one 128-wide K block, scales given)."""
    o_k = kb * 128 + tl.arange(0, 128)
    # [BLOCK_M, 128] e4m3
    b_a = tl.load(a_ptr + o_m[:, None] * K + o_k[None, :], mask=m_m[:, None], other=0.0)
    # [BLOCK_N, 128] e4m3
    b_b = tl.load(b_ptr + o_n[:, None] * K + o_k[None, :], mask=m_n[:, None], other=0.0)
    if SWAP_AB:
        d = tl.dot(b_b, tl.trans(b_a))
    else:
        d = tl.dot(b_a, tl.trans(b_b))
    return scale_dot(acc, d, s_a, s_b, BLOCK_N, SWAP_AB)


@triton.jit
def _fp8_iter_scales(kb, s_a, s_b, as_ptr, bs_ptr, i_n, o_m, o_n, m_m, m_n, n_kb,
                     AS_E8M0: tl.constexpr, BS_E8M0: tl.constexpr, BLOCK_N: tl.constexpr, PREFETCH: tl.constexpr):
    """(scales for block kb, scales to carry into the next iteration). PREFETCH: (s_a, s_b) were
    loaded one iteration ago and block kb + 1's are loaded now; otherwise block kb's are loaded
    here, where they are used."""
    if PREFETCH:
        s_a_n, s_b_n = _fp8_scales(kb + 1, as_ptr, bs_ptr, i_n, o_m, o_n, m_m, m_n, n_kb, AS_E8M0, BS_E8M0, BLOCK_N)
    else:
        s_a, s_b = _fp8_scales(kb, as_ptr, bs_ptr, i_n, o_m, o_n, m_m, m_n, n_kb, AS_E8M0, BS_E8M0, BLOCK_N)
        s_a_n, s_b_n = s_a, s_b
    return s_a, s_b, s_a_n, s_b_n


@triton.jit
def _fp8_iteration(acc, kb, s_a, s_b, a_ptr, as_ptr, b_ptr, bs_ptr, i_n, o_m, o_n, m_m, m_n, K, n_kb,
                   AS_E8M0: tl.constexpr, BS_E8M0: tl.constexpr, SWAP_AB: tl.constexpr, BLOCK_N: tl.constexpr,
                   PREFETCH: tl.constexpr):
    """One K block of the pointer kernel: returns (acc, the scales to carry)."""
    s_a, s_b, s_a_n, s_b_n = _fp8_iter_scales(kb, s_a, s_b, as_ptr, bs_ptr, i_n, o_m, o_n, m_m, m_n, n_kb,
                                              AS_E8M0, BS_E8M0, BLOCK_N, PREFETCH)
    acc = _fp8_step_scaled(acc, kb, s_a, s_b, a_ptr, b_ptr, o_m, o_n, m_m, m_n, K, SWAP_AB, BLOCK_N)
    return acc, s_a_n, s_b_n


@triton.jit
def store_tile(out_ptr, acc, o_m, o_n, m_m, m_n, M, N, i_split, SWAP_AB: tl.constexpr):
    """Write the [BLOCK_M, BLOCK_N] tile (acc is [BLOCK_N, BLOCK_M] under SWAP_AB) of split i_split."""
    base = out_ptr + i_split.to(tl.int64) * M * N
    if SWAP_AB:
        tl.store(base + o_m[None, :] * N + o_n[:, None], acc.to(out_ptr.dtype.element_ty), mask=m_m[None, :] & m_n[:, None])
    else:
        tl.store(base + o_m[:, None] * N + o_n[None, :], acc.to(out_ptr.dtype.element_ty), mask=m_m[:, None] & m_n[None, :])


@triton.jit
def split_range(n_kb, kb_per_split):
    """[kb0, kb1): the K blocks of this program's split (program_id(1))."""
    # int32 loop bounds: the software pipeliner does not multi-buffer a loop over int64 bounds
    i_split = tl.program_id(1)
    kb0 = i_split * kb_per_split
    kb1 = tl.minimum(kb0 + kb_per_split, n_kb)
    return i_split, kb0, kb1


# M, n_kb and kb_per_split only bound loops and masks: not specializing them (==1, %16) keeps
# one compiled kernel per config instead of one per shape.
@triton.jit(do_not_specialize=["M", "n_kb", "kb_per_split"])
def _fp8_gemm_kernel(
    a_ptr, as_ptr, b_ptr, bs_ptr, out_ptr, M, N, K, n_kb, kb_per_split,
    AS_E8M0: tl.constexpr, BS_E8M0: tl.constexpr, SWAP_AB: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr, INTERPRET: tl.constexpr,
    PREFETCH: tl.constexpr = True,
):
    i_m, i_n = tile_coords(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    i_split, kb0, kb1 = split_range(n_kb, kb_per_split)
    o_m = i_m * BLOCK_M + tl.arange(0, BLOCK_M)
    o_n = i_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_m = o_m < M
    m_n = o_n < N
    if SWAP_AB:
        acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    s_a, s_b = _fp8_scales(kb0, as_ptr, bs_ptr, i_n, o_m, o_n, m_m, m_n, n_kb, AS_E8M0, BS_E8M0, BLOCK_N)
    if INTERPRET:
        # The interpreter (Triton 3.6 + NumPy >= 2.4) cannot run range() over a runtime bound;
        # a while loop runs there, but it is not software-pipelined on the GPU.
        kb = kb0
        while kb < kb1:
            acc, s_a, s_b = _fp8_iteration(acc, kb, s_a, s_b, a_ptr, as_ptr, b_ptr, bs_ptr, i_n, o_m, o_n, m_m, m_n, K,
                                           n_kb, AS_E8M0, BS_E8M0, SWAP_AB, BLOCK_N, PREFETCH)
            kb += 1
    else:
        for kb in range(kb0, kb1):
            acc, s_a, s_b = _fp8_iteration(acc, kb, s_a, s_b, a_ptr, as_ptr, b_ptr, bs_ptr, i_n, o_m, o_n, m_m, m_n, K,
                                           n_kb, AS_E8M0, BS_E8M0, SWAP_AB, BLOCK_N, PREFETCH)
    store_tile(out_ptr, acc, o_m, o_n, m_m, m_n, M, N, i_split, SWAP_AB)


@triton.jit(do_not_specialize=["M", "n_kb", "kb_per_split"])
def _fp8_gemm_tma_kernel(
    a_desc, as_ptr, b_desc, bs_ptr, out_ptr, M, N, K, n_kb, kb_per_split,
    AS_E8M0: tl.constexpr, BS_E8M0: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr, PREFETCH: tl.constexpr = True,
):
    """Same math as ``_fp8_gemm_kernel`` (non-swap), A / B tiles through TMA (GPU only)."""
    i_m, i_n = tile_coords(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    i_split, kb0, kb1 = split_range(n_kb, kb_per_split)
    o_m = i_m * BLOCK_M + tl.arange(0, BLOCK_M)
    o_n = i_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_m = o_m < M
    m_n = o_n < N
    row_a = (i_m * BLOCK_M).to(tl.int32)
    row_b = (i_n * BLOCK_N).to(tl.int32)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    s_a, s_b = _fp8_scales(kb0, as_ptr, bs_ptr, i_n, o_m, o_n, m_m, m_n, n_kb, AS_E8M0, BS_E8M0, BLOCK_N)
    for kb in range(kb0, kb1):
        col = kb * 128
        b_a = a_desc.load([row_a, col])  # [BLOCK_M, 128] e4m3, rows >= M zero-filled
        b_b = b_desc.load([row_b, col])  # [BLOCK_N, 128] e4m3
        s_a, s_b, s_a_n, s_b_n = _fp8_iter_scales(kb, s_a, s_b, as_ptr, bs_ptr, i_n, o_m, o_n, m_m, m_n, n_kb,
                                                  AS_E8M0, BS_E8M0, BLOCK_N, PREFETCH)
        acc = scale_dot(acc, tl.dot(b_a, tl.trans(b_b)), s_a, s_b, BLOCK_N, False)
        s_a, s_b = s_a_n, s_b_n
    store_tile(out_ptr, acc, o_m, o_n, m_m, m_n, M, N, i_split, False)


@triton.jit
def _split_k_reduce_kernel(ws_ptr, c_ptr, MN, SPLIT_K: tl.constexpr, BLOCK: tl.constexpr):
    """c[i] = bf16(sum_s ws[s, i]), summed in split order (deterministic)."""
    o = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = o < MN
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for s in tl.static_range(SPLIT_K):
        acc += tl.load(ws_ptr + s * MN + o, mask=m, other=0.0)
    tl.store(c_ptr + o, acc.to(c_ptr.dtype.element_ty), mask=m)


# Launch configs keyed by the M band (first band with m <= max M wins), chosen by
# scripts/tune_gemm.py on the H200 (Triton 3.6, torch 2.11), cold L2 by reading 2x L2 before each
# run (docs/measurements/2026-11-29_tune_fp8_*.log; docs/gemm.md). Byte floor of N7168 K16384 at
# 4238 GB/s: 27.7 us.
#   M 1/16, N7168 K16384: 34.3 / 35.3 us (1.24x / 1.27x of the floor; _scaled_mm per-tensor
#     36.4 / 37.4, row-wise 70.6 / 64.9) with 16x64 swap-AB, 5 stages (6 stages 35.2 / 35.5);
#     N2112 K7168 and N24576 K1536 13.1 / 15.1 us, launch-bound like _scaled_mm (11.9 / 14.6).
#   M 64, N7168 K16384: 40.7 us non-swap 64x64 3 stages (1.45x of the floor; 4 stages 42.1,
#     64x128 48.0, swap 64x128 55.9, 64x32 57; _scaled_mm per-tensor 36.0, row-wise 54.6).
#   M 512: 64x128 TMA 146 / 32.0 / 35.6 us on N7168 K16384 / N2112 K7168 / N4096 K7168
#     (_scaled_mm 84.8 / 18.3 / 26.0).
#   M 4096: 128x128 TMA 8 warps 4 stages GROUP_M 16: 967 / 935 TFLOP/s on N7168 K16384 /
#     N4096 K7168 = 0.68x / 0.67x _scaled_mm per-tensor (0.58-0.62x on the K <= 2048 shapes).
#     5 stages ~= GROUP_M 16; 128x256 / 256x128 tiles spill (the scaled accumulation keeps the dot
#     result and the accumulator live: 2 x 128 regs per thread); one-warpgroup 128x64 / 64x128
#     tiles (2-3 CTAs per SM) were slower: 0.46-0.54x.
# Decode bands stream the weight: swap-AB puts the weight rows in the MMA's M.
_CONFIGS = (
    (16, GemmConfig(16, 64, 4, 5, True)),
    (32, GemmConfig(32, 64, 4, 5, True)),  # not measured (no benchmark shape): the M <= 16 shape
    (64, GemmConfig(64, 64, 4, 3, False)),
    (1024, GemmConfig(64, 128, 4, 4, False, 8, True)),
    (None, GemmConfig(128, 128, 8, 4, False, 16, True)),
)


@functools.lru_cache(maxsize=None)
def _device_props(device_index: int):
    p = torch.cuda.get_device_properties(device_index)
    return p.multi_processor_count, p.major


def _props(device: torch.device):
    return _device_props(device.index if device.index is not None else torch.cuda.current_device())




def pick_config(m: int, table=None) -> GemmConfig:
    for max_m, cfg in table or _CONFIGS:
        if max_m is None or m <= max_m:
            return cfg
    raise AssertionError("unreachable: the last config has no M bound")


def pick_split_k(tiles: int, n_kb: int, sms: int, min_kb: int = 4, waves: int = 2) -> int:
    """Split K until the grid has about ``waves`` programs per SM, keeping >= min_kb K-blocks per split."""
    if tiles >= sms:
        return 1
    split = min(-(-waves * sms // tiles), max(1, n_kb // min_kb))
    return max(1, split)


def _tma_ok(cfg: GemmConfig, a: torch.Tensor, b: torch.Tensor) -> bool:
    return (cfg.tma and not cfg.swap_ab and a.is_cuda and not interpret_mode() and _props(a.device)[1] >= 9
            and a.data_ptr() % 16 == 0 and b.data_ptr() % 16 == 0)


def launch_gemm(kernel, a, a_s, b, b_s, n: int, k_blocks: int, extra: dict, split_k: int | None = None,
                config=None, tma_kernel=None, out: torch.Tensor | None = None):
    """Shared launcher of the FP8 / FP4 GEMM kernels: config pick, split-K workspace, reduce.

    ``config``: a :class:`GemmConfig` (or a tuple of its fields); ``split_k=None`` picks one.
    ``out``: a contiguous bf16 [M, N] to write instead of a new one (``split_k`` must be 1)."""
    m = a.shape[0]
    cfg = GemmConfig(*config) if config is not None else pick_config(m)
    tiles = triton.cdiv(m, cfg.block_m) * triton.cdiv(n, cfg.block_n)
    if split_k is None:
        split_k = pick_split_k(tiles, k_blocks, sm_count(a.device, interpret=4), waves=cfg.waves)
    kb_per_split = triton.cdiv(k_blocks, split_k)
    split_k = triton.cdiv(k_blocks, kb_per_split)  # no empty splits
    if out is not None and split_k != 1:
        raise ValueError(f"launch_gemm writes a given out only without split-K, got split_k={split_k}")
    c = torch.empty((m, n), dtype=torch.bfloat16, device=a.device) if out is None else out
    if m == 0 or n == 0:
        return c
    dst = c if split_k == 1 else torch.empty((split_k, m, n), dtype=torch.float32, device=a.device)
    as_e8m0 = a_s.dtype == torch.float8_e8m0fnu
    a_s = a_s.view(torch.uint8) if as_e8m0 else a_s
    meta = dict(AS_E8M0=as_e8m0, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, GROUP_M=cfg.group_m,
                PREFETCH=cfg.prefetch, num_warps=cfg.warps, num_stages=cfg.stages, **extra)
    if tma_kernel is not None and _tma_ok(cfg, a, b):
        from triton.tools.tensor_descriptor import TensorDescriptor

        a_desc = TensorDescriptor.from_tensor(a, [cfg.block_m, 128])
        b_desc = TensorDescriptor.from_tensor(b, [cfg.block_n, 128])
        tma_kernel[(tiles, split_k)](a_desc, a_s, b_desc, b_s, dst, m, n, a.shape[1], k_blocks, kb_per_split, **meta)
    else:
        kernel[(tiles, split_k)](a, a_s, b, b_s, dst, m, n, a.shape[1], k_blocks, kb_per_split,
                                 SWAP_AB=cfg.swap_ab, INTERPRET=interpret_mode(), **meta)
    if split_k > 1:
        block = 1024
        _split_k_reduce_kernel[(triton.cdiv(m * n, block),)](dst, c, m * n, SPLIT_K=split_k, BLOCK=block, num_warps=4)
    return c


# Prefill (M >= GLUON_MIN_M) on sm_90 runs the Gluon kernel (gluon.py: async wgmma overlapping the
# scale FMAs, warp-specialized TMA producer, persistent), when triton.experimental.gluon imports.
# H200, same run as _scaled_mm per-tensor (scripts/try_fp8_gluon.py,
# docs/measurements/2026-12-01_try_fp8_gluon.json), M = 4096: 0.80-0.91x of _scaled_mm's time
# ratio (N7168 K16384 0.875x at 5 stages, N4096 K7168 0.911x, N2112 K7168 0.797x, N24576 K1536
# 0.839x, N7168 K2048 0.886x at 4 stages, GROUP_M 8) vs 0.60-0.74x for the Triton kernel above;
# M = 512, N7168 K16384: 129.6 vs 141.5 us. M between 64 and 512 is not measured: Triton there.
GLUON_MIN_M = 512
#: False: never take the Gluon kernel (tuning, A/B runs)
GLUON = True


def _gluon_eligible(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether the Gluon kernel of ``gluon.py`` can run these operands at all (any M)."""
    if not (GLUON and a.is_cuda and not interpret_mode()):
        return False
    if _props(a.device)[1] != 9 or a.data_ptr() % 16 or b.data_ptr() % 16:
        return False  # wgmma is sm_90's; TMA needs 16-byte aligned bases
    from lowbit.ops.fp8_gemm.gluon import gluon_available

    return gluon_available()


def _gluon_ok(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape[0] >= GLUON_MIN_M and _gluon_eligible(a, b)


#: fp8_gemm at these M (inclusive) on sm_90 runs the same Gluon kernel as prefill with 64 x 64 tiles, a
#: ring of 8 K blocks and no split, when the 64-row weight tiles number between 3/4 of the SMs and
#: the SMs (one program a tile, most SMs busy): the weight stream of a row tile stays in one program,
#: its next blocks' TMA loads in flight during the async wgmma / scale FFMAs. H200, layer stack, same
#: run: N7168 K16384 M = 40..64 1.29-1.30x the byte floor against 1.34-1.37x for the Triton 64 x 64
#: kernel; N7168 K2048 7.9 vs 10.5 us. With fewer tiles (N2112, N4096: 33 / 64 programs) or more
#: (N24576: 384) it was slower (docs/gemm.md, "fifteenth session"), so those keep the Triton kernel.
DECODE_GLUON_M = (33, 64)
#: ... and at these M too where the weight is a short launch (``triton_mma.SHORT_LAUNCH_BYTES``):
#: no other decode kernel serves M = 17..32. H200, layer stack, same run (twenty-second session,
#: ``scripts/bench_gemm_stack.py --variants default,dg17``): N7168 K2048 M = 17 / 24 / 32 8.50 /
#: 8.40 / 8.28 us against 9.94 / 10.23 / 10.52 on the Triton kernel (whose M = 32 was slower than
#: row-wise ``_scaled_mm``); on the long N7168 K16384 it lost (M = 17 47.2 against 33.7 us).
DECODE_GLUON_SHORT_M = (17, 32)
#: the prefill kernel's launch options in that band (a programmatic dependent launch: M = 64
#: N7168 K16384 36.67 vs 36.9 us, N7168 K2048 7.7 vs 8.0, same run; docs/gemm.md "Seventeenth session")
DECODE_GLUON_CONFIG = dict(block_m=64, block_n=64, num_warps=4, stages=8, warp_specialize=False, pdl=True)


def decode_gluon_band(m: int, n: int, k: int) -> bool:
    """Whether M rows against an FP8 [N, K] weight are in the Gluon decode kernel's M band:
    ``DECODE_GLUON_M``, or ``DECODE_GLUON_SHORT_M`` for a weight of at most
    ``triton_mma.SHORT_LAUNCH_BYTES`` (the tile-count condition is checked separately)."""
    if DECODE_GLUON_M[0] <= m <= DECODE_GLUON_M[1]:
        return True
    return (DECODE_GLUON_SHORT_M[0] <= m <= DECODE_GLUON_SHORT_M[1]
            and _mma.weight_bytes(n, k, False) <= _mma.SHORT_LAUNCH_BYTES)


def _decode_gluon_ok(a: torch.Tensor, b: torch.Tensor) -> bool:
    if not (decode_gluon_band(a.shape[0], b.shape[0], b.shape[1]) and _gluon_eligible(a, b)):
        return False
    sms = _props(a.device)[0]
    return 3 * sms // 4 <= triton.cdiv(b.shape[0], DECODE_GLUON_CONFIG["block_n"]) <= sms


def gluon_config(k: int) -> dict:
    """Launch options of the Gluon kernel for K (the sweep's best: 5 stages at K >= 16384)."""
    return dict(warp_specialize=True, stages=5 if k >= 16384 else 4, group_m=8)


#: Decode sizes run the tensor-core GEMV of ``triton_mma.py``: fp4_gemm at M <= MMA_GEMV_MAX_M_FP4 (faster
#: than its wgmma kernel on every measured shape: 34 vs 76 µs at M = 1, 46 vs 81 at M = 16 on
#: N7168 K16384), fp8_gemm at M <= MMA_GEMV_MAX_M_FP8 (M = 1: 0.95-1.0x of the wgmma kernel's time; at
#: M = 16 the wgmma kernel is faster on 3 of the 5 shapes, e.g. 35.4 vs 39.4 µs on N7168 K16384).
#: Same-run sweep: docs/measurements/2026-12-01_mma_gemv_sweep.json, docs/gemm.md "fifth session".
MMA_GEMV_MAX_M_FP8 = 8
MMA_GEMV_MAX_M_FP4 = 16
#: fp8_gemm at these M (inclusive) on sm_90 runs the TMA-fed Gluon wgmma GEMV (``gluon_wgmma_gemv.py``):
#: at M = 16 it measured 1.00-1.14x the Triton kernel's layer-stack time on the five benchmark
#: shapes (N7168 K2048 8.09 vs 9.24 us, N2112 K7168 9.74 vs 10.04, the rest within 1%); at M = 64
#: it is 8-60% slower (docs/gemm.md, "fifteenth session"), at M = 1 within 2% of ``mma_gemv`` but
#: on two shapes. ``(1, 0)`` turns it off.
WGMMA_GEMV_M = (9, 16)


def fp8_gemm(a: torch.Tensor, a_s: torch.Tensor, b: torch.Tensor, b_s: torch.Tensor, split_k: int | None = None,
             config=None) -> torch.Tensor:
    """a e4m3 [M, K] contiguous, a_s [M, K/128]; b e4m3 [N, K], b_s [ceil(N/128), K/128] -> bf16 [M, N].

    ``config`` (:class:`GemmConfig`) and ``split_k`` override the tables (for tuning; they always
    select the Triton kernels)."""
    if (config is None and split_k is None and WGMMA_GEMV_M[0] <= a.shape[0] <= WGMMA_GEMV_M[1]
            and _wgmma.fp8_wgmma_gemv_ok(a, b) and _wgmma.counters_ready(a.device)):
        return _wgmma.fp8_wgmma_gemv(a, a_s, b, b_s)
    if config is None and split_k is None and a.shape[0] <= MMA_GEMV_MAX_M_FP8 and _mma.mma_gemv_ok(a, b, b_s):
        return _mma.mma_gemv(a, a_s, b, b_s, fp4=False)
    if config is None and split_k is None and _gluon_ok(a, b):
        from lowbit.ops.fp8_gemm.gluon import fp8_gemm_gluon

        return fp8_gemm_gluon(a, a_s, b, b_s, **gluon_config(a.shape[1]))
    if config is None and split_k is None and _decode_gluon_ok(a, b):
        from lowbit.ops.fp8_gemm.gluon import fp8_gemm_gluon

        cfg = dict(DECODE_GLUON_CONFIG)
        cfg["stages"] = max(2, min(cfg["stages"], a.shape[1] // 128))  # persistent only with stages <= K/128
        return fp8_gemm_gluon(a, a_s, b, b_s, **cfg)
    bs_e8m0 = b_s.dtype == torch.float8_e8m0fnu
    return launch_gemm(_fp8_gemm_kernel, a, a_s, b, b_s.view(torch.uint8) if bs_e8m0 else b_s, b.shape[0],
                       a.shape[1] // 128, {"BS_E8M0": bs_e8m0}, split_k, config, tma_kernel=_fp8_gemm_tma_kernel)
