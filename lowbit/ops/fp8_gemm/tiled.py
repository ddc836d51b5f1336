"""The tiled ``tl.dot`` GEMM of ``fp8_gemm``: ``C = A @ B^T`` with 1x128 (A) and 128x128 (B) block
scales, every M, every GPU with FP8 tensor cores, and the Triton interpreter.

Per 128-wide K block: one FP8 ``tl.dot`` (wgmma / QGMMA on sm_90), then ``acc += d * a_s * b_s``
in fp32 (two-level accumulation: the dot of each K block is scaled before it joins the sum).

* ``_fp8_gemm_kernel`` (pointer loads, software-pipelined by Triton). At decode sizes a config
  runs it "swap-AB": it computes the tile of ``C^T = B @ A^T`` so the weight rows fill the
  64-row MMA dimension and the few activation rows sit in the narrow N dimension (wgmma allows
  N = 8..256), instead of padding M up to 64.
* ``_fp8_gemm_tma_kernel``: the same math with the A / B tiles loaded by the Hopper
  tensor-memory accelerator (host ``TensorDescriptor``s; out-of-bounds rows arrive zero-filled),
  for configs with ``tma=True`` (the dispatch sets it only on sm_90+ with 16-byte aligned bases).

Small grids are split along K (``SPLIT_K``): each split writes an fp32 partial tile and a second
tiny kernel sums them in a fixed order (deterministic; no atomics, no zero-fill).
:func:`launch_gemm` is shared with ``fp4_gemm``'s tiled kernel.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from lowbit._backend import interpret_mode, sm_count
from lowbit.ops._scales import load_scale

__all__ = ["CONFIGS", "GemmConfig", "fp8_gemm_tiled", "launch_gemm", "pick_config", "pick_split_k",
           "split_range", "store_tile", "tile_coords"]


class GemmConfig(NamedTuple):
    """One launch configuration of the tiled GEMM kernels."""

    block_m: int  # activation rows per program
    block_n: int  # weight rows per program
    warps: int
    stages: int
    swap_ab: bool  # compute C^T tiles (decode)
    group_m: int = 8  # row tiles that share a weight tile in L2 (grouped order)
    tma: bool = False  # fp8 non-swap only: TMA descriptor loads
    waves: int = 2  # split K until the grid has about waves x #SMs programs


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
        s = load_scale(bs_ptr + (i_n * BLOCK_N // 128) * n_kb + kb, True, E8M0)
    else:
        s = load_scale(bs_ptr + (o_n // 128) * n_kb + kb, m_n, E8M0)
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
    load one past the end reloads it). The kernels call this one iteration ahead: Triton's
    pipeliner leaves these small loads in the loop right before their use, and issued at the top
    of the previous iteration their latency hides behind its dot instead of stalling the scale
    FMA (docs/gemm.md)."""
    kbc = tl.minimum(kb, n_kb - 1)
    s_a = load_scale(as_ptr + o_m * n_kb + kbc, m_m, AS_E8M0)
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
def _fp8_iteration(acc, kb, s_a, s_b, a_ptr, as_ptr, b_ptr, bs_ptr, i_n, o_m, o_n, m_m, m_n, K, n_kb,
                   AS_E8M0: tl.constexpr, BS_E8M0: tl.constexpr, SWAP_AB: tl.constexpr, BLOCK_N: tl.constexpr):
    """One K block of the pointer kernel with (s_a, s_b) loaded one iteration ago: loads block
    kb + 1's scales, returns (acc, those scales)."""
    s_a_n, s_b_n = _fp8_scales(kb + 1, as_ptr, bs_ptr, i_n, o_m, o_n, m_m, m_n, n_kb, AS_E8M0, BS_E8M0, BLOCK_N)
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
                                           n_kb, AS_E8M0, BS_E8M0, SWAP_AB, BLOCK_N)
            kb += 1
    else:
        for kb in range(kb0, kb1):
            acc, s_a, s_b = _fp8_iteration(acc, kb, s_a, s_b, a_ptr, as_ptr, b_ptr, bs_ptr, i_n, o_m, o_n, m_m, m_n, K,
                                           n_kb, AS_E8M0, BS_E8M0, SWAP_AB, BLOCK_N)
    store_tile(out_ptr, acc, o_m, o_n, m_m, m_n, M, N, i_split, SWAP_AB)


@triton.jit(do_not_specialize=["M", "n_kb", "kb_per_split"])
def _fp8_gemm_tma_kernel(
    a_desc, as_ptr, b_desc, bs_ptr, out_ptr, M, N, K, n_kb, kb_per_split,
    AS_E8M0: tl.constexpr, BS_E8M0: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr,
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
        s_a_n, s_b_n = _fp8_scales(kb + 1, as_ptr, bs_ptr, i_n, o_m, o_n, m_m, m_n, n_kb, AS_E8M0, BS_E8M0, BLOCK_N)
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
# ``lowbit tune fp8_gemm`` (``lowbit/ops/fp8_gemm/tune.py``) on the H200, cold L2 (numbers in
# docs/gemm.md). Decode bands stream the weight: swap-AB puts the weight rows in the MMA's M. M = 4096
# with 128x256 / 256x128 tiles spills (the scaled accumulation keeps the dot result and the
# accumulator live); one-warpgroup tiles were slower. The M <= 32 row has no benchmark shape: it
# repeats the M <= 16 one.
CONFIGS = (
    (16, GemmConfig(16, 64, 4, 5, True)),
    (32, GemmConfig(32, 64, 4, 5, True)),
    (64, GemmConfig(64, 64, 4, 3, False)),
    (1024, GemmConfig(64, 128, 4, 4, False, 8, True)),
    (None, GemmConfig(128, 128, 8, 4, False, 16, True)),
)


def pick_config(m: int, table=None) -> GemmConfig:
    """The config of the M band of ``m`` in ``table`` (default :data:`CONFIGS`)."""
    for max_m, cfg in table or CONFIGS:
        if max_m is None or m <= max_m:
            return cfg
    raise AssertionError("unreachable: the last config has no M bound")


def pick_split_k(tiles: int, n_kb: int, sms: int, min_kb: int = 4, waves: int = 2) -> int:
    """Split K until the grid has about ``waves`` programs per SM, keeping >= min_kb K-blocks per split."""
    if tiles >= sms:
        return 1
    split = min(-(-waves * sms // tiles), max(1, n_kb // min_kb))
    return max(1, split)


def launch_gemm(kernel, a, a_s, b, b_s, n: int, k_blocks: int, extra: dict, config: GemmConfig,
                split_k: int | None = None, tma_kernel=None, out: torch.Tensor | None = None):
    """Shared launcher of the FP8 / FP4 tiled GEMM kernels: split-K workspace and reduce.

    ``config``: a :class:`GemmConfig` (or a tuple of its fields); ``tma=True`` launches
    ``tma_kernel`` (fp8 non-swap only; the caller checks the device and the alignment).
    ``split_k=None`` picks one. ``out``: a contiguous bf16 [M, N] to write instead of a new one
    (``split_k`` must be 1)."""
    m = a.shape[0]
    cfg = GemmConfig(*config)
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
                num_warps=cfg.warps, num_stages=cfg.stages, **extra)
    if cfg.tma and tma_kernel is not None:
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


def fp8_gemm_tiled(a: torch.Tensor, a_s: torch.Tensor, b: torch.Tensor, b_s: torch.Tensor,
                   config: GemmConfig | None = None, split_k: int | None = None) -> torch.Tensor:
    """a e4m3 [M, K] contiguous, a_s [M, K/128]; b e4m3 [N, K], b_s [ceil(N/128), K/128] -> bf16 [M, N].

    ``config`` (default: the M band's row of :data:`CONFIGS` without TMA) and ``split_k`` (default:
    the wave rule) are the launch parameters; the dispatch passes the band's config, with TMA
    where the device and the operands allow it."""
    cfg = GemmConfig(*config) if config is not None else pick_config(a.shape[0])._replace(tma=False)
    bs_e8m0 = b_s.dtype == torch.float8_e8m0fnu
    return launch_gemm(_fp8_gemm_kernel, a, a_s, b, b_s.view(torch.uint8) if bs_e8m0 else b_s, b.shape[0],
                       a.shape[1] // 128, {"BS_E8M0": bs_e8m0}, cfg, split_k, tma_kernel=_fp8_gemm_tma_kernel)
