"""Certified argmax over dense rows in one launch: the stored bf16 / fp16 rows are their own
coarse pass ("native"), the selection runs in the last program to finish.

Why: on a short-K head at M >= 16 (SmolLM2's 49152 x 576) the coarse pass is latency-bound, not
byte-bound — a plain ``tl.dot`` over the bf16 rows takes about as long as one over the INT8 copy
(H200, graph replay, cold L2: 25.9 vs 25.0 µs at M = 16, 28.3 vs 32.6 at M = 64) — while the INT8 pass's candidate epilogue and the separate
selection launch cost 10-60 µs more. Here the products are exact (bf16 x bf16 in fp32), so the
only error is the fp32 accumulation's and the certified sets are the near-ties alone; the
selection needs no launch of its own.

Program ``(i_mt, i_n)``: tokens ``[i_n BN, (i_n + 1) BN)`` against rows ``[i_mt BM, (i_mt + 1)
BM)`` of x. It computes ``c = x . w`` on the tensor cores (fp32 accumulator) and the bound ``b``
(:func:`native_bound_coef`; one per block, from the block's largest row norm),
writes per row the block's best upper bound ``ub = c + b`` with its token and the best ``ub`` of
the block's other tokens ("rest"), folds the block's best lower bound ``c - b`` into the row's
running best (``atomic_max``), and registers the block in the row's list (at most ``LIST_CAP``
entries) if its best ``ub`` reaches that running best — a block that does not can hold no
candidate, since the final threshold is at least as high. Then it takes a ticket; the last of
the ``NB`` programs of an M tile (``acq_rel``: it sees every other program's writes) answers the
tile's rows, ``ANSWER_ROWS`` at a time:

* ``L`` = the row's best lower bound; members = registered blocks whose best ``ub >= L``; a
  block whose rest reaches ``L`` may hide a second member ("offending").
* One member and no offending block (the usual case): the member's token is the argmax — every
  other token ``t`` has ``fl(e_t) <= ub_t < L <= fl(e_best)`` — no rescoring needed.
* Otherwise the row is rescored exactly: every member token, and every token of an offending
  block (fp32 dots of the stored rows, the definition of :func:`lowbit.ops.gathered_dot`); ties
  go to the lower index. A row with more registrations than its list holds is decided from the
  per-block records of all NB blocks instead. Always exact, whatever the data: an adversarial
  row (all tokens equal) is scored in full by that one program — slow, but right.

Statistics go to the ``CERTIFIED_STATS`` buffer (rows, fallbacks = rows with an offending block,
wide = rows with more than ``cap`` member blocks and none offending, set_sum / set_max = member
blocks, calls). The tickets are left at zero by the last program, so CUDA-graph replays work;
each stream has its own tickets and lists (:mod:`.scratch`), so calls on two streams may run at once.

Memory order: the ticket is the one ``acq_rel`` atomic (it publishes every program's records
to the last one). Everything else is ``relaxed``: on sm_90 an ``acq_rel`` atomic is a GPU-wide
fence, a round trip and an L1 invalidation, and the eight the answer code once had cost 7-14 µs
of the launch's critical path (H200, docs/draft_head.md).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from lowbit._backend import interpret_mode
from lowbit.ops.coarse_head.epilogue import pow2
from lowbit.ops.coarse_head.exact_keys import INT64_MIN, exact_dot_block, exact_dot_one, ordered_bits, pack_key
from lowbit.ops.coarse_head.reference import ABS_SLACK, gamma
from lowbit.ops.coarse_head.scratch import device_state

#: rows of x per program at most (more rows: more M tiles)
MAX_BM = 64
#: M band (``min(MAX_BM, pow2(M))``, at least 16) -> (BM rows per program, num_warps, num_stages,
#: maxnreg or None, BN tokens per program). A band's BM may be below the band: the M tiles of
#: one token block are neighbours in the grid (M tile fastest), so the second read of a weight
#: block hits L2 instead of DRAM while the epilogue per program stays that of the smaller tile.
#: The last program's code shares the kernel's register allocation, so its tiles are small (TBK,
#: EBK, ANSWER_ROWS below): sm_90 offline BM 16 / 4 warps 78 registers, BM 32 / 4 warps 87. Timed
#: on the H200 on SmolLM2's head (graph replay, cold L2; docs/draft_head.md): band 64 as two BM 32
#: tiles, 2 stages, capped at 64 registers beat one BM 64 tile and the uncapped / 3-stage forms.
_CONFIGS = {16: (16, 4, 3, None, 128), 32: (32, 4, 3, None, 128), 64: (32, 4, 2, 64, 128)}
#: K step of the coarse pass
BK = 64
#: K chunk of the last program's exact whole-block scoring, and of its single-token dots
TBK, EBK = 8, 256
#: rows the last program answers at a time
ANSWER_ROWS = 32
def native_bound_coef(k: int) -> float:
    """``beta`` with ``|c - x.w| <= beta ||x||_2 ||w||_2`` for the kernel's ``c``.

    The products of two bf16 (or two fp16) values are exact in fp32; the tensor cores sum them
    into the fp32 accumulator, at most ``K + 16`` deep counting the chained K steps, with a
    relative error per addition of at most ``u = 2^-23`` (twice the unit roundoff: accumulators
    may truncate). So ``|c - e| <= gamma(K + 16) sum |x_k w_k| <= gamma ||x||_2 ||w||_2``
    (Cauchy-Schwarz). ``||w||_2`` is stored rounded up; ``||x||_2`` is an fp32 sum of squares
    (relative error <= gamma) and a square root, and ``b`` two more products and a sum: the
    factor ``(1 + 2 gamma)(1 + 2^-18)`` covers them. An absolute ``ABS_SLACK`` covers products lost
    to underflow."""
    g = gamma(k + 16)
    return g * (1.0 + 2.0 * g) * (1.0 + 2.0**-18)


@triton.jit
def _rescore(x_ptr, w_ptr, m, thr, ub, rest, tok, live, N, stride_xm, stride_wn, K: tl.constexpr,
             BN: tl.constexpr, EBK: tl.constexpr, TBK: tl.constexpr):
    """The exact argmax of row m over block records ``ub, rest, tok`` [P] (``live`` where a record
    is real): every member token (``ub >= thr``) and every token of an offending block (``rest >=
    thr``) scored exactly; the best (value desc, token asc) as a packed key."""
    offend = live & (rest >= thr)
    need = live & ((ub >= thr) | offend)
    slot = tl.cumsum(need.to(tl.int32), axis=0) - 1
    n_need = tl.sum(need.to(tl.int32), axis=0)
    best = tl.full([], INT64_MIN, dtype=tl.int64)
    o_t = tl.arange(0, BN)
    for j in range(0, n_need):
        pick = need & (slot == j)
        t = tl.sum(tl.where(pick, tok, 0), axis=0).to(tl.int64)
        if tl.sum(tl.where(pick, offend.to(tl.int32), 0), axis=0) > 0:  # the whole block of t
            tt = (t // BN) * BN + o_t
            m_t = tt < N
            v = exact_dot_block(x_ptr, w_ptr, m, tt, m_t, stride_xm, stride_wn, K, TBK)
            best = tl.maximum(best, tl.max(tl.where(m_t, pack_key(v, tt), INT64_MIN), axis=0))
        else:  # the block's best token only
            best = tl.maximum(best, pack_key(exact_dot_one(x_ptr, w_ptr, m, t, stride_xm, stride_wn, K, EBK), t))
    return best


@triton.jit
def _answer_rows(x_ptr, w_ptr, bub_ptr, btok_ptr, brest_ptr, lg_ptr, rc_ptr, lub_ptr, ltok_ptr, lrest_ptr,
                 st_ptr, out_ptr, row0, first, M, N, NB, R, stride_xm, stride_wn, K: tl.constexpr, RC: tl.constexpr,
                 BN: tl.constexpr, NBP: tl.constexpr, CAP: tl.constexpr, EBK: tl.constexpr, TBK: tl.constexpr):
    """Rows ``[row0, row0 + RC)`` in the last program of their M tile: every row's verdict from
    its registered blocks, the easy rows' answers, the statistics (``first``: the call's first
    chunk, which counts the call), the exact rescoring of the rows that need it, and the per-row
    scratch reset for the next call (see the module docstring)."""
    o_r = tl.arange(0, RC)
    o_m = row0 + o_r
    m_m = o_m < M
    o_c = tl.arange(0, CAP)
    neg = float("-inf")
    # every load of the verdict in one round trip: the whole list rows are read (entries past the
    # row's count are stale or uninitialised, and masked out below, after the loads)
    p = o_m[:, None] * CAP + o_c[None, :]
    lgv = tl.load(lg_ptr + o_m, mask=m_m, other=0, cache_modifier=".cg")
    cnt = tl.load(rc_ptr + o_m, mask=m_m, other=0, cache_modifier=".cg")
    ub_all = tl.load(lub_ptr + p, mask=m_m[:, None], other=neg, cache_modifier=".cg")
    rest_all = tl.load(lrest_ptr + p, mask=m_m[:, None], other=neg, cache_modifier=".cg")
    tok_all = tl.load(ltok_ptr + p, mask=m_m[:, None], other=0, cache_modifier=".cg")
    thr = ordered_bits(lgv).to(tl.float32, bitcast=True)
    live = m_m[:, None] & (o_c[None, :] < cnt[:, None])
    ub = tl.where(live, ub_all, neg)
    rest = tl.where(live, rest_all, neg)
    member = live & (ub >= thr[:, None])
    size = tl.sum(member.to(tl.int32), axis=1)
    n_off = tl.sum((live & (rest >= thr[:, None])).to(tl.int32), axis=1)
    over = cnt > CAP  # more registrations than the list holds: the row's block records decide
    easy = (size == 1) & (n_off == 0) & (over == 0)
    tl.store(out_ptr + o_m, tl.max(tl.where(member, tok_all, -1), axis=1).to(tl.int64), mask=m_m & easy)
    # statistics: atomicity only (the host reads them after the launch); an acq_rel atomic
    # would cost a GPU-wide fence and an L1 invalidation each
    one = m_m.to(tl.int64)
    tl.atomic_add(st_ptr + 0, tl.sum(one, axis=0), sem="relaxed")
    tl.atomic_add(st_ptr + 1, tl.sum(one * (n_off > 0).to(tl.int64), axis=0), sem="relaxed")
    tl.atomic_add(st_ptr + 2, tl.sum(one * ((n_off == 0) & (size > R)).to(tl.int64), axis=0), sem="relaxed")
    tl.atomic_add(st_ptr + 3, tl.sum(one * size.to(tl.int64), axis=0), sem="relaxed")
    tl.atomic_max(st_ptr + 4, tl.max(one * size.to(tl.int64), axis=0), sem="relaxed")
    if first:
        tl.atomic_add(st_ptr + 5, 1, sem="relaxed")
    hard = m_m & (easy == 0)
    if tl.sum(hard.to(tl.int32), axis=0) > 0:
        o_b = tl.arange(0, NBP)
        m_b = o_b < NB
        for r in range(0, RC):
            sel = o_r == r
            if tl.sum(tl.where(sel, hard.to(tl.int32), 0), axis=0) > 0:
                m = (row0 + r).to(tl.int64)
                thr_r = tl.max(tl.where(sel, thr, neg), axis=0)
                if tl.sum(tl.where(sel, over.to(tl.int32), 0), axis=0) > 0:  # every block's record
                    q_b = m * NB + o_b
                    best = _rescore(x_ptr, w_ptr, m, thr_r,
                                    tl.load(bub_ptr + q_b, mask=m_b, other=neg, cache_modifier=".cg"),
                                    tl.load(brest_ptr + q_b, mask=m_b, other=neg, cache_modifier=".cg"),
                                    tl.load(btok_ptr + q_b, mask=m_b, other=0, cache_modifier=".cg"),
                                    m_b, N, stride_xm, stride_wn, K, BN, EBK, TBK)
                else:  # the registered blocks (every block that could hold the argmax)
                    q_l = m * CAP + o_c
                    m_q = o_c < tl.sum(tl.where(sel, cnt, 0), axis=0)
                    best = _rescore(x_ptr, w_ptr, m, thr_r,
                                    tl.load(lub_ptr + q_l, mask=m_q, other=neg, cache_modifier=".cg"),
                                    tl.load(lrest_ptr + q_l, mask=m_q, other=neg, cache_modifier=".cg"),
                                    tl.load(ltok_ptr + q_l, mask=m_q, other=0, cache_modifier=".cg"),
                                    m_q, N, stride_xm, stride_wn, K, BN, EBK, TBK)
                tl.store(out_ptr + m, 2147483647 - (best & 0xFFFFFFFF))
    # the per-row scratch, as the next call expects it
    tl.store(lg_ptr + o_m, tl.full([RC], -2147483648, dtype=tl.int32), mask=m_m)
    tl.store(rc_ptr + o_m, tl.zeros([RC], dtype=tl.int32), mask=m_m)


@triton.jit
def _answer_tile(x_ptr, w_ptr, bub_ptr, btok_ptr, brest_ptr, lg_ptr, rc_ptr, lub_ptr, ltok_ptr, lrest_ptr,
                 st_ptr, out_ptr, i_mt, M, N, NB, R, stride_xm, stride_wn, K: tl.constexpr, BM: tl.constexpr,
                 RC: tl.constexpr, BN: tl.constexpr, NBP: tl.constexpr, CAP: tl.constexpr, EBK: tl.constexpr,
                 TBK: tl.constexpr):
    """The last program of M tile ``i_mt`` answers its rows in chunks of RC (a runtime loop: the
    chunk's tiles, not the tile's, set this code's share of the kernel's registers)."""
    for r0 in range(0, BM, RC):
        _answer_rows(x_ptr, w_ptr, bub_ptr, btok_ptr, brest_ptr, lg_ptr, rc_ptr, lub_ptr, ltok_ptr, lrest_ptr,
                     st_ptr, out_ptr, i_mt * BM + r0, (i_mt == 0) & (r0 == 0), M, N, NB, R, stride_xm, stride_wn,
                     K, RC, BN, NBP, CAP, EBK, TBK)


@triton.jit(do_not_specialize=["M", "R"], do_not_specialize_on_alignment=["MT"])
def _fused_argmax_kernel(x_ptr, w_ptr, wn_ptr, bub_ptr, btok_ptr, brest_ptr, lg_ptr, rc_ptr, lub_ptr, ltok_ptr,
                         lrest_ptr, cnt_ptr, st_ptr, out_ptr, M, N, NB, R, MT, stride_xm, stride_wn, beta, abs_slack,
                         K: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                         NBP: tl.constexpr, CAP: tl.constexpr, EBK: tl.constexpr, TBK: tl.constexpr,
                         F32: tl.constexpr, RC: tl.constexpr):
    # one grid axis, M tile fastest: the MT M tiles of one token block run side by side. MT is
    # specialised when it is 1 (Triton's rule for an int argument of 1), which keeps the one-tile
    # bands at their measured registers (sm_90 offline, BM 32: 87 with MT = 1, 98 with MT
    # unknown; a second grid axis for the M tile cost the same); the band-64 tiles (MT >= 2) are
    # one compiled kernel whatever M, so a warmup covers them all.
    i_n = (tl.program_id(0) // MT).to(tl.int64)
    i_mt = tl.program_id(0) % MT
    o_n = i_n * BN + tl.arange(0, BN)
    m_n = o_n < N
    o_m = i_mt * BM + tl.arange(0, BM)
    m_m = o_m < M
    o_k = tl.arange(0, BK)
    # transposed: logits^T [BN, BM] = W [BN, BK] @ x^T [BK, BM] (the weight tile is the A operand)
    acc = tl.zeros([BN, BM], dtype=tl.float32)
    xsq = tl.zeros([BK, BM], dtype=tl.float32)
    for k0 in range(0, K, BK):
        m_k = (k0 + o_k) < K
        b_w = tl.load(w_ptr + o_n[:, None] * stride_wn + k0 + o_k[None, :], mask=m_n[:, None] & m_k[None, :],
                      other=0.0)
        b_xt = tl.load(x_ptr + o_m[None, :].to(tl.int64) * stride_xm + k0 + o_k[:, None],
                       mask=m_m[None, :] & m_k[:, None], other=0.0)
        xf = b_xt.to(tl.float32)
        xsq += xf * xf
        if F32:  # the interpreter (whose bf16 dot is broken): exact products, fp32 sums
            acc = tl.dot(b_w.to(tl.float32), b_xt.to(tl.float32), acc, input_precision="ieee")
        else:
            acc = tl.dot(b_w, b_xt, acc)
    xn = tl.sqrt(tl.sum(xsq, axis=0))  # [BM]
    wn = tl.load(wn_ptr + o_n, mask=m_n, other=0.0)
    neg = float("-inf")
    tok = (i_n * BN).to(tl.int32) + tl.arange(0, BN)  # int32: the reductions below stay 32-bit
    # one bound for the whole block (its largest row norm): the reductions run on the coarse
    # values themselves, and no [BN, BM] bound tile is formed; rounding is monotone, so
    # fl(c_max + b) bounds every fl(c_t + b) and fl(c_max - b) <= fl(c_loc - b)
    b = beta * (xn * tl.max(wn, axis=0)) + abs_slack  # [BM]
    c = tl.where(m_n[:, None], acc, neg)
    cmax = tl.max(c, axis=0)
    loc = tl.min(tl.where(c == cmax[None, :], tok[:, None], N + BN), axis=0)
    c2 = tl.max(tl.where(tok[:, None] == loc[None, :], neg, c), axis=0)
    blb = cmax - b
    best = cmax + b
    rest = c2 + b
    p = o_m * NB + i_n
    tl.store(bub_ptr + p, best, mask=m_m)
    tl.store(btok_ptr + p, loc, mask=m_m)
    tl.store(brest_ptr + p, rest, mask=m_m)
    # the row's running best lower bound; a block whose best upper bound does not reach it
    # cannot hold the argmax (the final threshold is at least as high) and is not registered
    # (in the ordered-int domain: the untouched value INT32_MIN is no float). These atomics are
    # relaxed: they need no ordering of their own -- the ticket's release below publishes them
    own = ordered_bits(blb.to(tl.int32, bitcast=True))
    seen = tl.maximum(tl.atomic_max(lg_ptr + o_m, own, mask=m_m, sem="relaxed"), own)
    reg = m_m & (best >= ordered_bits(seen).to(tl.float32, bitcast=True))
    slot = tl.atomic_add(rc_ptr + o_m, 1, mask=reg, sem="relaxed")
    q = o_m * CAP + slot
    keep = reg & (slot < CAP)
    tl.store(lub_ptr + q, best, mask=keep)
    tl.store(ltok_ptr + q, loc, mask=keep)
    tl.store(lrest_ptr + q, rest, mask=keep)
    tl.debug_barrier()  # every thread's stores are issued before the ticket
    done = tl.atomic_add(cnt_ptr + i_mt, 1, sem="acq_rel")
    if done == NB - 1:
        _answer_tile(x_ptr, w_ptr, bub_ptr, btok_ptr, brest_ptr, lg_ptr, rc_ptr, lub_ptr, ltok_ptr, lrest_ptr,
                     st_ptr, out_ptr, i_mt, M, N, NB, R, stride_xm, stride_wn, K, BM, RC, BN, NBP, CAP, EBK, TBK)
        tl.atomic_xchg(cnt_ptr + i_mt, 0, sem="relaxed")  # every ticket of this launch is taken


_SCRATCH: dict = {}
#: registered blocks one row's list holds (more: the row's block records decide, still exact)
LIST_CAP = 32


class _Scratch:
    """Per-device state every call leaves as it found it: tickets per M tile (0), each row's
    running best lower bound (ordered int32, INT32_MIN) and registration count (0)."""

    def __init__(self, device, m: int):
        self.m = max(64, m)
        self.tickets = torch.zeros(-(-self.m // 16), dtype=torch.int32, device=device)
        self.best = torch.full((self.m,), -(2**31), dtype=torch.int32, device=device)
        self.count = torch.zeros(self.m, dtype=torch.int32, device=device)


def _scratch(device, m: int) -> _Scratch:
    return device_state(_SCRATCH, device, m, _Scratch, lambda sc: sc.m)


def fused_argmax(x: torch.Tensor, weight: torch.Tensor, norms: torch.Tensor, cap: int, stats: torch.Tensor
                 ) -> torch.Tensor:
    """int64 [M]: the exact argmax of ``x [M, K] @ weight[N, K]^T`` per row (lower index among
    exact ties), certified as described in the module docstring; ``norms`` = :func:`row_norms`
    of ``weight`` (:func:`lowbit.ops.coarse_head.row_norms`); ``stats`` (int64 ``CERTIFIED_STATS``) accumulates in place; ``cap`` only sorts
    rows into the "wide" statistic. Same 16-bit dtype for x and weight (``coarse_head.fused_supported``);
    the caller validates shapes. Triton only; no host synchronization."""
    m, k = x.shape
    n = weight.shape[0]
    if x.stride(1) != 1:
        x = x.contiguous()
    dev = x.device
    bm, warps, stages, maxnreg, block = _CONFIGS[min(MAX_BM, max(16, pow2(m)))]
    mt = -(-m // bm)
    nb = -(-n // block)
    sc = _scratch(dev, m)
    f32 = dict(dtype=torch.float32, device=dev)
    bub, brest = torch.empty(m, nb, **f32), torch.empty(m, nb, **f32)
    btok = torch.empty(m, nb, dtype=torch.int32, device=dev)
    lub, lrest = torch.empty(m, LIST_CAP, **f32), torch.empty(m, LIST_CAP, **f32)
    ltok = torch.empty(m, LIST_CAP, dtype=torch.int32, device=dev)
    out = torch.empty(m, dtype=torch.int64, device=dev)
    _fused_argmax_kernel[(mt * nb,)](
        x, weight, norms, bub, btok, brest, sc.best, sc.count, lub, ltok, lrest, sc.tickets, stats, out,
        m, n, nb, cap, mt, x.stride(0), weight.stride(0), native_bound_coef(k), ABS_SLACK,
        K=k, BM=bm, BN=block, BK=BK, NBP=pow2(nb), CAP=LIST_CAP, EBK=min(EBK, pow2(k)), TBK=TBK,
        F32=interpret_mode(), RC=min(bm, ANSWER_ROWS),
        num_warps=warps, num_stages=stages, **({"maxnreg": maxnreg} if maxnreg else {}))
    return out


__all__ = ["LIST_CAP", "fused_argmax", "native_bound_coef"]
