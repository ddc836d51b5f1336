"""Fused fast-mode selection + exact rerank (two Triton launches instead of ~12 torch ops).

After the coarse pass, fast mode needs: the ``R`` best coarse candidates of each row, their exact
logits against the original dense rows, and the best ``k`` of those (argmax: k = 1). With torch
ops that is a top-k, gathers, a gathered dot, masks and an argmax — a dozen launches of a few µs
each, more than the whole INT2 byte floor at M = 1. Here:

* selection (grid ``(M,)``): the ``R`` best of the row's ``C`` candidate keys, ordered by one
  packed int64 key ``(order-preserving key bits << 32) | (CP - 1 - pos)`` (ties go to the lower
  candidate position, i.e. the lower token index, because blocks are emitted in token order and
  each block's candidates in key order, lower index first among equals). Two forms with the
  same output: ``_select_topk_kernel`` (the R best block heads, then the R best of those blocks'
  candidates, each stage one bitonic top-k) and ``_select_kernel`` (successive maxima over all C
  candidates: the path when blocks emit no known candidate count). Writes the picked token
  indices ``sel [M, R]`` (-1: no token). The bitonic form's second stage keys the candidates by
  token instead of position: the same picks, since equal keys have tokens in position order.
* ``_rerank_kernel`` (grid ``(M, R / picks)``): a program's exact fp32 dots ``x[m] . W[sel[m,
  r]]`` of ``RERANK_ROWS`` picks (``RERANK_ROWS_WIDE`` from M = 33) into ``vals [M, R]``; the
  last program of each row (an atomic counter, reset by that program so the buffer is reusable
  and CUDA-graph replay works) picks the best ``k`` values, ties to the lower token index, and
  writes ``out_v [M, k]``, ``out_i [M, k]``.

Exact values are fp32-accumulated dot products of the stored x and weight rows (the same
definition as :func:`lowbit.ops.gathered_dot`; the summation order may differ, so the last bit
may too). Dense weights only (bf16 / fp16 / fp32); FP8 / NVFP4 heads keep the torch path.
Nothing is mutated except the internal counter buffer, which every call leaves at zero.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from lowbit.ops._triton_pdl import launch_options
from lowbit.ops.coarse_head.epilogue import cdiv, pow2
from lowbit.ops.coarse_head.scratch import device_state


_INT64_MIN = tl.constexpr(-(2**63))
#: the order-preserving int32 of -inf (bits 0xFF800000 ^ 0x7FFFFFFF) and of +inf (0x7F800000)
_ORD_NEG_INF = tl.constexpr(-2139095041)
_ORD_POS_INF = tl.constexpr(2139095040)


@triton.jit
def _pdl_prologue(PDL: tl.constexpr, TRIGGER: tl.constexpr):
    """PDL (a launch with ``launch_pdl=True``): wait for the previous kernel (the coarse pass or
    the selection: its candidates are read next) before any global access; TRIGGER: then let the
    next PDL launch place its CTAs."""
    if PDL:
        gdc_wait()
        if TRIGGER:
            gdc_launch_dependents()


@triton.jit
def _key_bits(key):
    """int64 order-preserving bits of an fp32 key in the high word (negatives: the magnitude bits
    flipped), so a larger key packs larger whatever the low word holds."""
    bits = key.to(tl.int32, bitcast=True)
    ordk = tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits)
    return ordk.to(tl.int64) << 32


@triton.jit
def _pack_key(key, pos, CP: tl.constexpr):
    """int64 (order-preserving key bits << 32) | (CP - 1 - pos): larger key first, then lower pos."""
    return _key_bits(key) | (CP - 1 - pos).to(tl.int64)


@triton.jit
def _pack_key_token(key, tok):
    """int64 (order-preserving key bits << 32) | (2^31 - 1 - tok): larger key first, then the lower
    token (int64, < 2^31)."""
    return _key_bits(key) | (0x7FFFFFFF - tok)


@triton.jit
def _store_selected(ck_ptr, ci_ptr, sel_ptr, m, C, R, pos, o_r):
    """Write the tokens at candidate positions ``pos`` (-1 where the key is -inf: a filler)."""
    m_r = o_r < R
    k_sel = tl.load(ck_ptr + m * C + pos, mask=m_r, other=float("-inf"))
    tok = tl.load(ci_ptr + m * C + pos, mask=m_r, other=0)
    tok = tl.where(k_sel > float("-inf"), tok, -1)
    tl.store(sel_ptr + m * R + o_r, tok, mask=m_r)


@triton.jit
def _select_kernel(ck_ptr, ci_ptr, sel_ptr, C, R, CP: tl.constexpr, RP: tl.constexpr, PDL: tl.constexpr = False,
                   TRIGGER: tl.constexpr = False):
    _pdl_prologue(PDL, TRIGGER)
    m = tl.program_id(0).to(tl.int64)
    o_c = tl.arange(0, CP)
    m_c = o_c < C
    key = tl.load(ck_ptr + m * C + o_c, mask=m_c, other=float("-inf"))
    packed = tl.where(m_c, _pack_key(key, o_c, CP), _INT64_MIN)
    o_r = tl.arange(0, RP)
    pos = tl.full([RP], 0, dtype=tl.int64)
    for r in range(0, R):
        best = tl.max(packed, axis=0)
        p = CP - 1 - (best & 0xFFFFFFFF)
        pos = tl.where(o_r == r, p, pos)
        packed = tl.where(packed == best, _INT64_MIN, packed)
    _store_selected(ck_ptr, ci_ptr, sel_ptr, m, C, R, pos, o_r)


@triton.jit
def _select_topk_kernel(ck_ptr, ci_ptr, sel_ptr, C, R, KC: tl.constexpr, CP: tl.constexpr, NBP: tl.constexpr,
                        RP: tl.constexpr, KCP: tl.constexpr, PDL: tl.constexpr = False,
                        TRIGGER: tl.constexpr = False, TOKKEY: tl.constexpr = False):
    """Two stages, the same result as :func:`_select_kernel`: each block's candidates are emitted
    best first, so the block holding any of the row's R best candidates has its first candidate
    ("head") among the R best too. Stage 1: the R best heads; stage 2: the R best of those R
    blocks' R * KC candidates. Each stage is one bitonic top-RP (``tl.topk``: log2 steps of
    compare-exchange over the whole tile at once) rather than R successive block-wide maxima
    (each a reduction across the program's warps: R = 32 of them in a row is a chain of barriers). The packed keys are
    distinct (they carry the position), so the RP largest are well defined; the first R of them
    are the R picks of the successive-max form, in the same order.

    TOKKEY: stage 2 packs each candidate's token instead of its position (``(key bits << 32) |
    (2^31 - 1 - token)``, the tokens loaded with the keys), so the picks' tokens come out of the
    top-k itself instead of a dependent load after it. The same picks in the same order wherever
    equal keys have tokens in position order -- as every coarse pass emits them (blocks in token
    order, a block's equal keys lower index first); fillers (-inf keys) are -1 either way."""
    _pdl_prologue(PDL, TRIGGER)
    m = tl.program_id(0).to(tl.int64)
    NB = C // KC
    o_b = tl.arange(0, NBP)
    m_b = o_b < NB
    head = tl.load(ck_ptr + m * C + o_b * KC, mask=m_b, other=float("-inf"))
    packed = tl.where(m_b, _pack_key(head, o_b * KC, CP), _INT64_MIN)  # NBP >= RP: fillers pad
    best = tl.topk(packed, RP)  # [RP] descending
    o_r = tl.arange(0, RP)
    blk = tl.where((o_r < R) & (best != _INT64_MIN), (CP - 1 - (best & 0xFFFFFFFF)) // KC, -1)
    o_k = tl.arange(0, KCP)
    m2 = (blk >= 0)[:, None] & (o_k < KC)[None, :]
    pos2 = blk[:, None] * KC + o_k[None, :]
    key2 = tl.load(ck_ptr + m * C + pos2, mask=m2, other=float("-inf"))
    if TOKKEY:
        tok2 = tl.load(ci_ptr + m * C + pos2, mask=m2, other=0)
        pk = tl.reshape(tl.where(m2, _pack_key_token(key2, tok2), _INT64_MIN), [RP * KCP])
        best2 = tl.topk(pk, RP)
        ordk = best2 >> 32  # the key's order-preserving bits: a real key is > -inf and not NaN
        real = (ordk > _ORD_NEG_INF) & (ordk <= _ORD_POS_INF)
        tl.store(sel_ptr + m * R + o_r, tl.where(real, 0x7FFFFFFF - (best2 & 0xFFFFFFFF), -1), mask=o_r < R)
    else:
        pk = tl.reshape(tl.where(m2, _pack_key(key2, pos2, CP), _INT64_MIN), [RP * KCP])
        best2 = tl.topk(pk, RP)
        pos = CP - 1 - (best2 & 0xFFFFFFFF)
        _store_selected(ck_ptr, ci_ptr, sel_ptr, m, C, R, pos, o_r)


@triton.jit
def _rerank_kernel(x_ptr, w_ptr, sel_ptr, val_ptr, cnt_ptr, ov_ptr, oi_ptr, R, stride_xm, stride_wn,
                   K: tl.constexpr, BKK: tl.constexpr, RP: tl.constexpr, KOUT: tl.constexpr,
                   BIG: tl.constexpr, PDL: tl.constexpr = False, TRIGGER: tl.constexpr = False,
                   RPP: tl.constexpr = 1):
    """Grid (M, cdiv(R, RPP)): program (m, j) rescores picks ``j RPP .. j RPP + RPP - 1`` of row m
    (one [RPP, BKK] tile of their weight rows a K chunk); the row's last program to arrive picks
    the best KOUT."""
    _pdl_prologue(PDL, TRIGGER)
    m = tl.program_id(0).to(tl.int64)
    o_p = tl.program_id(1) * RPP + tl.arange(0, RPP)
    m_p = o_p < R
    tok = tl.load(sel_ptr + m * R + o_p, mask=m_p, other=-1)
    valid = tok >= 0
    row = tl.where(valid, tok, 0)
    o_k = tl.arange(0, BKK)
    acc = tl.zeros([RPP, BKK], dtype=tl.float32)
    for k0 in range(0, K, BKK):
        mk = (k0 + o_k) < K
        b_w = tl.load(w_ptr + row[:, None] * stride_wn + (k0 + o_k)[None, :], mask=valid[:, None] & mk[None, :],
                      other=0.0).to(tl.float32)
        b_x = tl.load(x_ptr + m * stride_xm + k0 + o_k, mask=mk, other=0.0).to(tl.float32)
        acc += b_w * b_x[None, :]
    val = tl.sum(acc, axis=1)
    val = tl.where(valid, val, float("-inf"))
    tl.store(val_ptr + m * R + o_p, val, mask=m_p)
    tl.debug_barrier()
    # the last program of row m to arrive (acq_rel: it sees every other program's value)
    done = tl.atomic_add(cnt_ptr + m, 1, sem="acq_rel")
    if done == tl.cdiv(R, RPP) - 1:
        o_r = tl.arange(0, RP)
        m_r = o_r < R
        vals = tl.load(val_ptr + m * R + o_r, mask=m_r, other=float("-inf"), cache_modifier=".cg")
        toks = tl.load(sel_ptr + m * R + o_r, mask=m_r, other=-1)
        # fillers (no token) get distinct out-of-range indices so ties among them stay ordered
        toks = tl.where(toks >= 0, toks, BIG + o_r)
        live = m_r
        for j in tl.static_range(KOUT):
            vm = tl.where(live, vals, float("-inf"))
            best = tl.max(vm, axis=0)
            loc = tl.min(tl.where(live & (vm == best), toks, BIG + 2 * RP), axis=0)
            tl.store(ov_ptr + m * KOUT + j, best)
            tl.store(oi_ptr + m * KOUT + j, tl.where(loc >= BIG, 0, loc))
            live = live & (toks != loc)
        tl.atomic_xchg(cnt_ptr + m, 0, sem="relaxed")  # every program of the row has arrived


_COUNTERS: dict[torch.device, torch.Tensor] = {}


def _counter(device: torch.device, m: int) -> torch.Tensor:
    """A zeroed int32 [>= m] buffer per device (each call leaves it zero again)."""
    def make(dev, rows):
        return torch.zeros(max(rows, 64), dtype=torch.int32, device=dev)

    return device_state(_COUNTERS, device, m, make, torch.Tensor.numel)


#: warps of the bitonic selection program (one program per row of x): 8 measured 1.5-1.7 us faster
#: than 4 at M = 1..32 (H200, C = 7760, R = 32; docs/draft_head.md)
SELECT_WARPS = 8
#: the rerank program's K chunk at most (a 5120-wide row: two chunks of 4096 at 4096, one masked
#: chunk of 8192 at 8192)
RERANK_MAX_BKK = 4096
#: picks a rerank program rescores (a power of two; its K chunk is ``RERANK_MAX_BKK`` / picks): 1 up
#: to M = 32, ``RERANK_ROWS_WIDE`` from M = 33 (a quarter of the M x R programs: fastest at M = 64,
#: 0.7-1.9 us slower at M <= 8; docs/draft_head.md)
RERANK_ROWS = 1
RERANK_ROWS_WIDE = 4
def fast_select_rerank(cand_key: torch.Tensor, cand_idx: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
                       r: int, k: int, kcand: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """The exact top-``k`` (values fp32 [M, k] descending, indices int64 [M, k]; ties: lower
    index) among the ``r`` best coarse candidates of each row. ``kcand``: candidates per block
    as emitted (each block's best first; 0 = unknown: the flat selection). ``cand_key`` fp32 / ``cand_idx``
    int64 [M, C] from the coarse pass, ``x [M, K]``, ``weight`` dense [N, K] (the exact rows).
    Requires ``k <= min(r, C)``; the caller validates shapes. Nothing is mutated."""
    m, c = cand_key.shape
    r = min(r, c)
    if x.stride(1) != 1:
        x = x.contiguous()
    if weight.stride(1) != 1:
        weight = weight.contiguous()
    dev = x.device
    sel = torch.empty(m, r, dtype=torch.int64, device=dev)
    vals = torch.empty(m, r, dtype=torch.float32, device=dev)
    out_v = torch.empty(m, k, dtype=torch.float32, device=dev)
    out_i = torch.empty(m, k, dtype=torch.int64, device=dev)
    launch_select(cand_key, cand_idx, sel, kcand, weight.shape[0])
    launch_rerank(x, weight, sel, vals, out_v, out_i)
    return out_v, out_i


def launch_select(cand_key: torch.Tensor, cand_idx: torch.Tensor, sel: torch.Tensor, kcand: int, n: int) -> None:
    """The selection launch of :func:`fast_select_rerank`: the picked tokens of each row into
    ``sel`` int64 [M, R] (R <= C) from the candidates ``cand_key`` / ``cand_idx`` [M, C] of a head
    of ``n`` rows."""
    m, c = cand_key.shape
    r = sel.shape[1]
    cp = pow2(c)
    rp = pow2(r)
    staged = kcand > 0 and c % kcand == 0 and rp * pow2(kcand) <= 4096
    # programmatic dependent launch where the GPU has it; the rerank launch may place its CTAs at once
    sel_opts = launch_options(sel.device, True, True, None)
    if staged:
        rp2 = max(2, rp)  # tl.topk of k = 1 reduces to a scalar (Triton 3.6): keep k >= 2
        _select_topk_kernel[(m,)](cand_key, cand_idx, sel, c, r, KC=kcand, CP=cp, NBP=max(rp2, pow2(c // kcand)),
                                  RP=rp2, KCP=pow2(kcand), TOKKEY=n < 2**31,
                                  num_warps=SELECT_WARPS, **sel_opts)
    else:
        _select_kernel[(m,)](cand_key, cand_idx, sel, c, r, CP=cp, RP=rp, num_warps=8 if cp >= 4096 else 4,
                             **sel_opts)


def launch_rerank(x: torch.Tensor, weight: torch.Tensor, sel: torch.Tensor, vals: torch.Tensor,
                  out_v: torch.Tensor, out_i: torch.Tensor) -> None:
    """The rerank launch of :func:`fast_select_rerank`: the exact values of the picks ``sel``
    [M, R] into ``vals`` fp32 [M, R], the best ``k`` of each row into ``out_v`` / ``out_i`` [M, k]
    (``x`` and ``weight`` with unit stride along K)."""
    m, r = sel.shape
    kk = x.shape[1]
    # one program per (row, pick) up to M = 32: the whole K row in at most two loads per operand,
    # so the ~10 KB of a 5120-wide bf16 row are in flight at once (the kernel is latency-bound);
    # beyond, RERANK_ROWS_WIDE picks a program (fewer programs; the same bytes in flight)
    rpp = RERANK_ROWS_WIDE if m > 32 else RERANK_ROWS
    bkk = min(RERANK_MAX_BKK // rpp, pow2(kk))
    _rerank_kernel[(m, cdiv(r, rpp))](x, weight, sel, vals, _counter(x.device, m), out_v, out_i, r, x.stride(0),
                                       weight.stride(0), K=kk, BKK=bkk, RP=pow2(r), KOUT=out_v.shape[1],
                                       BIG=weight.shape[0] + 1, RPP=rpp, num_warps=8 if rpp * bkk >= 2048 else 4,
                                       **launch_options(x.device, True, False, None))


__all__ = ["fast_select_rerank", "launch_rerank", "launch_select"]
