"""Rows of x as int8 for the int8-wgmma coarse pass (``wgmma_int8.py``), in its stage layout.

Per row m: ``sx[m] = amax_k |x[m, k]| / 127`` and ``xq[m, k] = round_half_even(x[m, k] * 127 /
amax)`` (0 for an all-zero row), so ``x ~= xq * sx`` to within ``sx / 2`` per element. The codes
are stored for the coarse kernel's TMA boxes, per stage s (64 packed bytes of the INTx
plane-split copy, plane length ``L``) and half c, the P planes side by side in one row of ``32 P``
bytes::

    xq_tiles[(s * 2 + c) * NB + m, 32 j + b] = xq[m, j * L + 64 s + 32 c + b]    (b < 32)
    xsum[s * 4 + j, m] = sum_{b < 64} xq[m, j * L + 64 s + b]                    (int32)

with zeros for rows m >= M (up to NB, the wgmma's N) and for K positions >= K (the INTx
padding). A stage's x arrives in two TMA boxes of NB rows x 32 P bytes: every CTA of the coarse
pass re-reads all of x from L2, and boxes of 32-byte rows made x the largest part of the pass's
stream (docs/draft_head.md). ``xsum`` lets the kernel remove the zero point exactly in integers.

With ``perm`` (INT2, the whole-row variant's byte-permute decode) the tile of (stage s, plane j)
holds instead the K positions that decode emits for its j-th output register: the sources are
:func:`prmt_k_order` (a permutation within each stage; ``xsum`` then sums the permuted tiles).

Why int8 x: at M = 64 the head's product is 81 GFLOP for a 124160 x 5120 head -- more than
bf16 tensor cores do in the 3x-cuBLAS time budget -- while int8 wgmma runs at twice the rate
and multiplies the integer codes exactly. The price is an approximation of x (relative error
about ``amax / (254 rms)`` per element), which is why only fast mode (approximate by definition,
reranked exactly) takes this path; :func:`x_int8_reference` is its definition.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from lowbit._backend import interpret_mode
from lowbit.ops._triton_pdl import launch_options

_ROUND = 12582912.0  # 1.5 * 2^23: (v + R) - R rounds |v| < 2^22 to the nearest integer, ties to even


def x_int8_reference(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(xq int8 [M, K], sx fp32 [M]): the definition the kernel follows (fp32 arithmetic)."""
    xf = x.float()
    amax = xf.abs().amax(dim=1)
    # a tensor numerator: ``127.0 / t`` is ``t.reciprocal() * 127`` in torch, not a true division
    inv = torch.where(amax > 0, torch.full_like(amax, 127.0) / torch.where(amax > 0, amax, 1.0), 0.0)
    q = torch.round(xf * inv[:, None]).clamp_(-127, 127).to(torch.int8)
    return q, amax / 127.0


def prmt_source(b, v):
    """Byte-permute decode (INT2, 4 planes): which code output register ``v`` (0..3) of the decode
    puts at position ``b`` (0..63: half ``b // 32``, wgmma K slot ``b % 32``) of a stage s -- the
    code of plane ``j`` in packed byte ``B`` of the stage, i.e. K index ``j L + 64 s + B``.

    Why: the decode turns one packed word (bytes B0..B0+3 of a row, 16 codes) into 4 registers
    with one ``prmt`` each, whose 4-bit selectors are nibbles of the word: register v holds, in
    its bytes e = 0..3, the codes of byte ``B0 + 2 (v % 2) + e // 2`` and plane
    ``v // 2 + 2 (e % 2)``. The lane's word of K slots ``b - e .. b - e + 3`` starts at packed byte
    ``B0 = 32 (b // 32) + (b % 32) - e`` (the wgmma's 8-bit A fragment), and x is laid out to match.
    Works on ints and on integer tensors; returns ``(j, B)``."""
    e = b % 4
    return v // 2 + 2 * (e % 2), b - e + 2 * (v % 2) + e // 2


def prmt_k_order(ell: int) -> torch.Tensor:
    """int64 [4 ell]: entry ``v ell + 64 s + b`` is the K index (``j ell + 64 s + B``, see
    :func:`prmt_source`) whose x value the permuted tile of (stage s, register v) holds at ``b``."""
    ns = ell // 64
    v = torch.arange(4).view(4, 1, 1)
    s = torch.arange(ns).view(1, ns, 1)
    b = torch.arange(64).view(1, 1, 64)
    j, byte = prmt_source(b, v)
    return (j * ell + 64 * s + byte).reshape(-1)


def tile_reference(xq: torch.Tensor, ell: int, planes: int, nb: int,
                   perm: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """``xq`` int8 [M, K] -> (xq_tiles int8 [NS * 2 * NB, 32 P], xsum int32 [NS * 4, NB]) as in
    the module docstring (NS = ell / 64, P = ``planes``; ``perm``: the byte-permute decode's
    order, P = 4)."""
    if perm and planes != 4:
        raise ValueError(f"the byte-permute order serves 4 planes (INT2), got {planes}")
    m, k = xq.shape
    ns = ell // 64
    full = torch.zeros(nb, planes * ell, dtype=torch.int8, device=xq.device)
    full[:m, :k] = xq
    if perm:
        full = full[:, prmt_k_order(ell).to(xq.device)]
    t = full.view(nb, planes, ns, 2, 32).permute(2, 3, 0, 1, 4).reshape(ns * 2 * nb, planes * 32)
    sums = full.view(nb, planes, ns, 64).to(torch.int32).sum(-1)  # [NB, P, NS]
    xsum = torch.zeros(ns, 4, nb, dtype=torch.int32, device=xq.device)
    xsum[:, :planes] = sums.permute(2, 1, 0)
    return t.contiguous(), xsum.view(ns * 4, nb)


@triton.jit
def _load_tile(x_ptr, stride_xm, t0, t, b, m, M, K, L: tl.constexpr, P: tl.constexpr, PERM: tl.constexpr):
    """(pair indices tt [TB], stages s, planes j, x values fp32 [TB, 64]) of the (stage, plane)
    pairs t0 .. t0 + TB - 1 of row m, 0 past K and for rows m >= M (PERM: the tile of (s, j)
    gathers the K positions of ``prmt_source``)."""
    NS: tl.constexpr = L // 64
    tt = t0 + t  # pair index = s * P + j
    s = tt // P
    j = tt % P
    if PERM:
        e = b[None, :] % 4
        vv = j[:, None]
        k = (vv // 2 + 2 * (e % 2)) * L + 64 * s[:, None] + b[None, :] - e + 2 * (vv % 2) + e // 2
    else:
        k = j[:, None] * L + 64 * s[:, None] + b[None, :]  # [TB, 64]
    ok = (tt[:, None] < NS * P) & (k < K) & (m < M)
    return tt, s, j, tl.load(x_ptr + m * stride_xm + k, mask=ok, other=0.0).to(tl.float32)


@triton.jit
def _tile_store(xv, inv, tt, s, j, b, m, xq_ptr, xs_ptr, L: tl.constexpr, P: tl.constexpr, NB: tl.constexpr,
                INTERPRET: tl.constexpr):
    """Quantize the loaded x values ``xv`` [TB, 64] of pairs ``tt`` with the row's ``inv`` and store
    their codes (side by side) and 64-sums."""
    NS: tl.constexpr = L // 64
    if INTERPRET:
        v = xv * inv
    else:
        # mul.rn is never contracted with the add below into an FMA (the PTX rule for an explicit
        # rounding mode), so the product is rounded to fp32 first, as in the definition; plain
        # arithmetic gets fused into an FMA, which rounds some ties differently
        v = tl.inline_asm_elementwise("mul.rn.f32 $0, $1, $2;", "=f,f,f", [xv, inv + tl.zeros_like(xv)],
                                      dtype=tl.float32, is_pure=True, pack=1)
    q = (v + 12582912.0) - 12582912.0  # round half to even (|v| <= 127)
    q = tl.minimum(tl.maximum(q, -127.0), 127.0)
    qi = q.to(tl.int32)
    c = b // 32
    dst = ((s[:, None] * 2 + c[None, :]) * NB + m) * (32 * P) + j[:, None] * 32 + b[None, :] % 32
    tl.store(xq_ptr + dst, qi.to(tl.int8), mask=tt[:, None] < NS * P)
    xs_at = xs_ptr + (s * 4 + j) * NB + m
    tl.store(xs_at, tl.sum(qi, axis=1), mask=tt < NS * P)


@triton.jit(do_not_specialize=["M", "K"])
def _x_int8_kernel(x_ptr, xq_ptr, xs_ptr, sx_ptr, M, K, stride_xm, L: tl.constexpr, P: tl.constexpr,
                   NB: tl.constexpr, BLK: tl.constexpr, TB: tl.constexpr, INTERPRET: tl.constexpr,
                   PERM: tl.constexpr = False, TRIGGER: tl.constexpr = False, PDL: tl.constexpr = False):
    """Program (m < NB, t): row m's scale (every program of the row computes it; program t = 0
    stores it), then its codes and 64-sums of the (stage, plane) pairs t TB .. t TB + TB - 1,
    t + G .., ... (G = the grid's second size; PERM: the tile of (s, j) gathers the K positions of
    ``prmt_source``). The first step's x is loaded before the row's amax (it does not depend on
    it), so both loads are in flight at once. PDL: launched as a programmatic dependent launch --
    nothing global is touched before ``griddepcontrol.wait`` (x is the previous kernel's output);
    TRIGGER: the next kernel, a programmatic dependent launch, may place its CTAs at once (it
    still waits for this one's writes)."""
    if PDL:
        gdc_wait()
    if TRIGGER:
        gdc_launch_dependents()
    m = tl.program_id(0)
    part = tl.program_id(1)
    parts = tl.num_programs(1)
    row_ok = m < M
    t = tl.arange(0, TB)
    b = tl.arange(0, 64)
    first = part * TB
    tt, s, j, xv = _load_tile(x_ptr, stride_xm, first, t, b, m, M, K, L, P, PERM)
    o = tl.arange(0, BLK)
    amax = tl.zeros([BLK], dtype=tl.float32)
    for k0 in range(0, K, BLK):
        v = tl.load(x_ptr + m * stride_xm + k0 + o, mask=row_ok & (k0 + o < K), other=0.0).to(tl.float32)
        amax = tl.maximum(amax, tl.abs(v))
    a = tl.max(amax, axis=0)
    inv = tl.where(a > 0.0, tl.div_rn(tl.full([], 127.0, tl.float32), tl.where(a > 0.0, a, 1.0)), 0.0)
    if part == 0:
        tl.store(sx_ptr + m, tl.div_rn(a, tl.full([], 127.0, tl.float32)))
    NS: tl.constexpr = L // 64
    _tile_store(xv, inv, tt, s, j, b, m, xq_ptr, xs_ptr, L, P, NB, INTERPRET)
    first += parts * TB
    for t0 in range(first, NS * P, parts * TB):
        tt, s, j, xv = _load_tile(x_ptr, stride_xm, t0, t, b, m, M, K, L, P, PERM)
        _tile_store(xv, inv, tt, s, j, b, m, xq_ptr, xs_ptr, L, P, NB, INTERPRET)


def x_int8_tiles(x: torch.Tensor, ell: int, planes: int, nb: int, perm: bool = False, trigger: bool = False):
    """Launch the quantize-and-tile kernel: ``x`` [M, K] (bf16 / fp16 / fp32, unit stride along
    K, M <= nb) -> (xq_tiles int8 [NS * 2 * NB, 32 P], xsum int32 [NS * 4, NB], sx fp32 [NB]).
    Rows of ``xsum`` for the unused planes j >= P are left unwritten (never read). ``perm``: the
    byte-permute decode's K order (:func:`prmt_k_order`; 4 planes only).

    Grid: NB rows x up to ``X_PARTS`` programs a row, each with a share of the (stage, plane)
    pairs: one program a row walking them all in sequence is a chain of dependent loads, not
    bytes. ``trigger``: a PDL chain follows (the coarse pass), so the launch is itself a
    programmatic dependent one -- its CTAs placed while the kernel before it drains -- and lets
    the next launch place its CTAs at once."""
    m, k = x.shape
    if m > nb or x.stride(1) != 1:
        raise ValueError(f"x_int8_tiles needs M <= {nb} rows with unit stride along K, got shape {tuple(x.shape)} "
                         f"stride {tuple(x.stride())}")
    if perm and planes != 4:
        raise ValueError(f"x_int8_tiles: the byte-permute order serves 4 planes (INT2), got {planes}")
    ns = ell // 64
    xq = torch.empty(ns * 2 * nb, 32 * planes, dtype=torch.int8, device=x.device)
    xs = torch.empty(ns * 4, nb, dtype=torch.int32, device=x.device)
    sx = torch.empty(nb, dtype=torch.float32, device=x.device)
    tb = X_TILE_PAIRS
    parts = max(1, min(X_PARTS, -(-ns * planes // tb)))
    blk = min(triton.next_power_of_2(k), 8192)  # the row's amax in one load up to K = 8192
    trigger = trigger and not interpret_mode()
    opts = {"TRIGGER": trigger, **launch_options(x.device, trigger, trigger, None)}
    _x_int8_kernel[(nb, parts)](x, xq, xs, sx, m, k, x.stride(0), L=ell, P=planes, NB=nb, BLK=blk, TB=tb,
                                INTERPRET=interpret_mode(), PERM=perm,
                                num_warps=8 if blk >= 4096 else 4, **opts)
    return xq, xs, sx


#: most programs a row of x (each recomputes the row's amax: K values from L2)
X_PARTS = 8
#: (stage, plane) pairs a program tiles per step
X_TILE_PAIRS = 16
