"""Certified mode's selection, exact rescoring and fallback without a host synchronization.

After the certified coarse pass (keys ``ub = c + b``, lower bounds, per-block ``rest``; see
:class:`~lowbit.ops.coarse_head.CoarseOut`) one launch of ``M S + G`` programs finishes a call, with
no value ever read back by the host -- so the whole certified call can be captured in a CUDA graph.
Each program takes a ticket as it starts and plays one of two roles (:func:`_certified_tail_kernel`;
one launch measured 12.9 us against 16.7 for the two roles as two launches, H200, M = 1):

1. rescoring (tickets below ``M S``, program ``(m, s)``): computes row m's threshold ``L`` (k = 1:
   the best block lower bound; k > 1: see :func:`lowbit.ops.coarse_head.selection.certify`), its certified set
   (candidates with ``ub >= L``, compacted in candidate order into ``sel [M, R]``) and its
   verdict: certified when no block may hide a member (``rest < L`` everywhere), it has at most
   ``R`` members and at least ``k``. It then computes the exact fp32 dots of x[m] with members
   ``s, s + S, ...`` against the stored dense rows; the row's last program to finish (an arrival
   counter, reset by it) writes the best ``k``. Program ``(m, 0)`` appends an uncertified row to the
   fallback list (atomic slot counters: rows scored in full from its front, wide rows from its back)
   and adds the row to the device statistics (rows, fallbacks, "wide" rows whose set exceeded ``R``
   but lay among the candidates, set-size sum and maximum, calls: an int64 buffer, layout
   ``CERTIFIED_STATS``, that the host reads only when asked).
2. fallback (the last ``G`` tickets): waits until every row's verdict is published, reads the
   fallback count; with none (the usual case) only checks in. Otherwise program ``g`` scores
   tokens ``[g BN, (g + 1) BN)``, ``(g + G) BN ...`` of every fallback row exactly (one row at a
   time, or from ``FULL_DOT_MIN_M`` rows 16 rows per weight tile on the tensor cores) -- below
   ``FULL_DOT_MIN_M`` rows, of a wide row no block of which may hide a member only its
   candidates in those slots, as the synchronizing path rescores them -- and keeps its best
   ``k``; the last program to check in merges the ``G`` partial lists per fallback row, writes the
   answer and resets the counters for the next call.

Ordering: ``(value desc, token asc)`` as one int64 ``(order-preserving value bits << 32) |
(2^31 - 1 - token)``; ties go to the lower token index, as everywhere in the draft head. Exact
values are fp32-accumulated dot products of the stored x and weight rows (the definition of
:func:`lowbit.ops.gathered_dot`; the summation order may differ, so the last bit may too).

Dense weights (bf16 / fp16 / fp32) and ``k <= CERTIFIED_MAX_K`` (the per-row lists live in
registers); other heads keep the synchronizing path in
:class:`lowbit.nn.DraftHead`. The internal counters are left at zero by every call, so replays of
a captured graph work; only the statistics buffer is mutated (by design).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from lowbit._backend import interpret_mode
from lowbit.ops.coarse_head.epilogue import pow2
from lowbit.ops.coarse_head.exact_keys import (INT64_MIN, exact_dot_block, exact_dot_one, pack_key,
                                               unpack_key)
from lowbit.ops.coarse_head.scratch import device_state
from lowbit.ops.coarse_head.selection import MAX_RESCAN_BLOCKS

#: tokens one fallback program scores per step, and at most this many fallback programs
FULL_BN = 128
FULL_PROGRAMS = 264
#: programs per row of the rescoring launch (each takes every S-th member of the set)
RESCORE_SPLIT = 4
#: the fallback scores 16 rows per weight tile on the tensor cores from this many rows of x on, one
#: row at a time below (H200, SmolLM2's head, certified topk(16) falling back on most rows: 92.7 vs
#: 138.7 us at M = 1, 288 vs 406 at M = 16; docs/draft_head.md)
FULL_DOT_MIN_M = 16


@triton.jit
def _store_best(keys, ov_ptr, oi_ptr, m, KOUT: tl.constexpr, KP: tl.constexpr):
    """Write the KOUT best of ``keys`` [KP] (descending) as values and token indices of row m."""
    v, t = unpack_key(keys)
    o = tl.arange(0, KP)
    tl.store(ov_ptr + m * KOUT + o, v, mask=o < KOUT)
    tl.store(oi_ptr + m * KOUT + o, t, mask=o < KOUT)


@triton.jit
def _certify_rescore(m, s, ck_ptr, clb_ptr, ci_ptr, blb_ptr, brest_ptr, x_ptr, w_ptr, sel_ptr, val_ptr, lbs_ptr, obl_ptr,
                     cnt_ptr, fbrow_ptr, fbcnt_ptr, done_ptr, st_ptr, ov_ptr, oi_ptr, C, NB, R, RT, N, M, stride_xm,
                     stride_wn, K: tl.constexpr, BKK: tl.constexpr, S: tl.constexpr, CP: tl.constexpr,
                     NBP: tl.constexpr, RP: tl.constexpr, KOUT: tl.constexpr, KP: tl.constexpr,
                     BLK: tl.constexpr, MAXB: tl.constexpr, DOT: tl.constexpr):
    """Program (m, s) of launch 1 (see the module docstring)."""
    # -- the certified set of row m (every program of the row computes the same one) --
    o_c = tl.arange(0, CP)
    m_c = o_c < C
    ub = tl.load(ck_ptr + m * C + o_c, mask=m_c, other=float("-inf"))
    o_b = tl.arange(0, NBP)
    m_b = o_b < NB
    blb = tl.load(blb_ptr + m * NB + o_b, mask=m_b, other=float("-inf"))
    if KOUT == 1:
        thr = tl.max(blb, axis=0)
    else:
        # any k lower bounds of distinct tokens bound the k-th best exact value from below: first
        # the k-th best block maximum, then the k-th best of the candidates' lower bounds that reach
        # it (the first R in candidate order, compacted through lbs: no sort over all C)
        o_k = tl.arange(0, KP)
        thr_b = tl.max(tl.where(o_k == KOUT - 1, tl.topk(blb, KP), float("-inf")), axis=0)
        lb = tl.load(clb_ptr + m * C + o_c, mask=m_c, other=float("-inf"))
        hi = m_c & (lb >= thr_b)
        at = tl.cumsum(hi.to(tl.int32), axis=0) - 1
        tl.store(lbs_ptr + m * R + at, lb, mask=hi & (at < R))
        tl.debug_barrier()
        n_hi = tl.minimum(tl.sum(hi.to(tl.int32), axis=0), R)
        o_h = tl.arange(0, RP)
        sub = tl.load(lbs_ptr + m * R + o_h, mask=o_h < n_hi, other=float("-inf"))
        thr_c = tl.max(tl.where(o_k == KOUT - 1, tl.topk(sub, KP), float("-inf")), axis=0)
        thr = tl.maximum(thr_b, thr_c)
    # blocks that may hide members (an unemitted ub reaches L): up to MAXB are rescored whole
    over = m_b & (tl.load(brest_ptr + m * NB + o_b, mask=m_b, other=float("-inf")) >= thr)
    nob = tl.sum(over.to(tl.int32), axis=0)
    hidden = (nob > MAXB) | (thr == float("-inf"))
    tok = tl.load(ci_ptr + m * C + o_c, mask=m_c, other=0)
    ranked = m_c & (ub >= thr)
    size = tl.sum(ranked.to(tl.int32), axis=0)
    in_over = tl.load(brest_ptr + m * NB + tok // BLK, mask=ranked & (nob > 0), other=float("-inf")) >= thr
    member = ranked & (in_over == 0)  # candidates of a rescored block come with the block
    n_c = tl.sum(member.to(tl.int32), axis=0)
    # the rescored blocks' ids, in block order (every program of the row stores the same)
    at_b = tl.cumsum(over.to(tl.int32), axis=0) - 1
    tl.store(obl_ptr + m * MAXB + at_b, o_b, mask=over & (at_b < MAXB))
    tl.debug_barrier()
    o_j = tl.arange(0, MAXB)
    blk = tl.load(obl_ptr + m * MAXB + o_j, mask=o_j < nob, other=0)
    ntok = tl.where(o_j < nob, tl.minimum(N - blk * BLK, BLK), 0)
    n_blk = tl.sum(ntok, axis=0)
    wide = (hidden == 0) & ((n_c > R) | (n_c + n_blk < KOUT))
    fall = hidden | wide
    if s == 0:
        if fall:
            # a slot; the release below publishes it. Rows scored in full fill the list from the
            # front (count fbcnt[0]); a wide row no block of which may hide a member, answered from
            # all its candidates (as the synchronizing path), from the back (count fbcnt[1]). With
            # DOT, one weight pass scores 16 rows in full: a wide row joins those batches instead
            # (its C candidates read alone cost C / N of a pass, gathered ~1.7x slower per byte;
            # H100, 124160 x 5120, every row wide: 0.35x at M = 1, 1.75x at M = 16)
            if wide & (nob == 0) & (not DOT):
                f = M - 1 - tl.atomic_add(fbcnt_ptr + 1, 1, sem="relaxed")
            else:
                f = tl.atomic_add(fbcnt_ptr, 1, sem="relaxed")
            tl.store(fbrow_ptr + f, m.to(tl.int32))
        # statistics: atomicity only (read by the host after the launch; acq_rel would cost a
        # GPU-wide fence and an L1 invalidation each)
        tl.atomic_add(st_ptr + 0, 1, sem="relaxed")
        tl.atomic_add(st_ptr + 1, hidden.to(tl.int64), sem="relaxed")
        tl.atomic_add(st_ptr + 2, wide.to(tl.int64), sem="relaxed")
        tl.atomic_add(st_ptr + 3, size.to(tl.int64), sem="relaxed")
        tl.atomic_max(st_ptr + 4, size.to(tl.int64), sem="relaxed")
        if m == 0:
            tl.atomic_add(st_ptr + 5, 1, sem="relaxed")
        tl.atomic_add(st_ptr + 6, ((fall == 0) & (nob > 0)).to(tl.int64), sem="relaxed")
        tl.atomic_add(done_ptr, 1, sem="release")  # row m's verdict is published
    n_set = tl.where(fall, 0, n_c + n_blk)
    # members in candidate order (blocks in token order): slot = exclusive prefix count, then the
    # rescored blocks' tokens. Every program of the row stores the same tokens; each reads back
    # only what it wrote itself.
    slot = tl.cumsum(member.to(tl.int32), axis=0) - 1
    tl.store(sel_ptr + m * RT + slot, tok.to(tl.int32), mask=member & (slot < R) & (fall == 0))
    o_t = tl.arange(0, BLK)
    base = n_c
    for j in range(0, MAXB):
        b_j = tl.sum(tl.where(o_j == j, blk, 0), axis=0)
        n_j = tl.sum(tl.where(o_j == j, ntok, 0), axis=0)
        tl.store(sel_ptr + m * RT + base + o_t, (b_j * BLK + o_t).to(tl.int32), mask=(o_t < n_j) & (fall == 0))
        base += n_j
    tl.debug_barrier()
    # -- exact rescoring of members s, s + S, ... --
    for r in range(s, n_set, S):
        t_r = tl.load(sel_ptr + m * RT + r).to(tl.int64)
        tl.store(val_ptr + m * RT + r, exact_dot_one(x_ptr, w_ptr, m, t_r, stride_xm, stride_wn, K, BKK))
    tl.debug_barrier()
    # the row's last program to arrive (acq_rel: it sees every other program's values)
    done = tl.atomic_add(cnt_ptr + m, 1, sem="acq_rel")
    if done == S - 1:
        if n_set > 0:  # fallback rows (n_set = 0) are answered by the fallback programs
            o_r = tl.arange(0, RP)
            live = o_r < n_set
            vals = tl.load(val_ptr + m * RT + o_r, mask=live, other=0.0, cache_modifier=".cg")
            toks = tl.load(sel_ptr + m * RT + o_r, mask=live, other=0, cache_modifier=".cg")
            keys = tl.where(live, pack_key(vals, toks), INT64_MIN)
            _store_best(tl.topk(keys, KP), ov_ptr, oi_ptr, m, KOUT, KP)
        tl.atomic_xchg(cnt_ptr + m, 0, sem="relaxed")  # every program of the row has arrived


@triton.jit
def _merge(best, keys, KP: tl.constexpr):
    """The KP largest of two descending [KP] key lists."""
    both = tl.reshape(tl.join(best, keys), [2 * KP])
    return tl.topk(both, KP)


@triton.jit
def _merge_rows(best, keys, FB: tl.constexpr, KP: tl.constexpr):
    """Per row, the KP largest of two descending [FB, KP] key lists."""
    both = tl.reshape(tl.join(best, keys), [FB, 2 * KP])
    return tl.topk(both, KP)


@triton.jit
def _dot_acc(a, b, acc, F32: tl.constexpr):
    """acc + a @ b: the tensor cores' products of two bf16 (or two fp16) tiles are exact and sum
    in fp32; other pairs (and the interpreter, whose bf16 dot is broken) go through fp32 IEEE."""
    if F32:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    else:
        return tl.dot(a, b, acc)


@triton.jit
def _full(g, G, ck_ptr, ci_ptr, x_ptr, w_ptr, fbrow_ptr, fbcnt_ptr, done_ptr, tk_ptr, part_ptr, arrive_ptr, ov_ptr,
          oi_ptr, C, N, M, stride_xm, stride_wn, K: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
          KOUT: tl.constexpr, KP: tl.constexpr, GC: tl.constexpr, FB: tl.constexpr, F32: tl.constexpr,
          DOT: tl.constexpr):
    """Fallback program g of G (launch 2, or the fused launch's tail; see the module docstring).
    A row scored in full: ``DOT``, FB such rows at a time share each weight tile (``[FB, BK] x
    [BK, BN]`` on the tensor cores); else one row at a time on the CUDA cores. A wide row (only
    without ``DOT``; with it wide rows are scored in full): its C candidates (those with a finite
    key), BN at a time, one row at a time. Slots: rows scored in full ``[0, n_fb)``, wide rows
    ``M - 1 - j`` for j < n_w."""
    n_fb = tl.load(fbcnt_ptr, cache_modifier=".cg")
    n_w = tl.load(fbcnt_ptr + 1, cache_modifier=".cg")  # 0 with DOT (wide rows join the batches)
    o_n = tl.arange(0, BN)
    o_k = tl.arange(0, BK)
    o_f = tl.arange(0, FB)
    if DOT:
        for f0 in range(0, n_fb, FB):
            m_f = (f0 + o_f) < n_fb
            rows = tl.load(fbrow_ptr + f0 + o_f, mask=m_f, other=0).to(tl.int64)
            best = tl.full([FB, KP], INT64_MIN, dtype=tl.int64)
            for n0 in range(g * BN, N, G * BN):
                tok = n0 + o_n
                m_n = tok < N
                acc = tl.zeros([FB, BN], dtype=tl.float32)
                for k0 in range(0, K, BK):
                    mk = (k0 + o_k) < K
                    b_x = tl.load(x_ptr + rows[:, None] * stride_xm + k0 + o_k[None, :],
                                  mask=m_f[:, None] & mk[None, :], other=0.0)
                    b_w = tl.load(w_ptr + tok.to(tl.int64)[:, None] * stride_wn + k0 + o_k[None, :],
                                  mask=m_n[:, None] & mk[None, :], other=0.0)
                    acc = _dot_acc(b_x, tl.trans(b_w), acc, F32)
                keys = tl.where(m_n[None, :], pack_key(acc, tok[None, :]), INT64_MIN)
                best = _merge_rows(best, tl.topk(keys, KP), FB, KP)
            tl.store(part_ptr + ((f0 + o_f)[:, None] * G + g) * KP + tl.arange(0, KP)[None, :], best,
                     mask=m_f[:, None])
    else:  # one row at a time: the rows scored in full, then the wide rows
        for i in range(0, n_fb + n_w):
            cands = i >= n_fb
            f = tl.where(cands, M - 1 - (i - n_fb), i)
            m = tl.load(fbrow_ptr + f).to(tl.int64)
            # positions: the row's candidate slots, or its tokens
            lim = tl.where(cands, C, N)
            best = tl.full([KP], INT64_MIN, dtype=tl.int64)
            for n0 in range(g * BN, lim, G * BN):
                pos = n0 + o_n
                m_n = pos < lim
                if cands:
                    tok = tl.load(ci_ptr + m * C + pos, mask=m_n, other=0)
                    m_n = m_n & (tl.load(ck_ptr + m * C + pos, mask=m_n, other=float("-inf")) > float("-inf"))
                else:
                    tok = pos.to(tl.int64)
                v = exact_dot_block(x_ptr, w_ptr, m, tok, m_n, stride_xm, stride_wn, K, BK)
                keys = tl.where(m_n, pack_key(v, tok), INT64_MIN)
                best = _merge(best, tl.topk(keys, KP), KP)
            tl.store(part_ptr + (f * G + g) * KP + tl.arange(0, KP), best)
    tl.debug_barrier()
    done = tl.atomic_add(arrive_ptr, 1, sem="acq_rel")
    if done == G - 1:
        o_g = tl.arange(0, GC)
        o_p = tl.arange(0, KP)
        for i in range(0, n_fb + n_w):
            f = tl.where(i >= n_fb, M - 1 - (i - n_fb), i)
            m = tl.load(fbrow_ptr + f).to(tl.int64)
            best = tl.full([KP], INT64_MIN, dtype=tl.int64)
            for g0 in range(0, G, GC):  # GC programs' lists at a time
                gg = g0 + o_g
                keys = tl.load(part_ptr + (f * G + gg[:, None]) * KP + o_p[None, :], mask=(gg < G)[:, None],
                               other=INT64_MIN, cache_modifier=".cg")
                best = _merge(best, tl.topk(tl.reshape(keys, [GC * KP]), KP), KP)
            _store_best(best, ov_ptr, oi_ptr, m, KOUT, KP)
        # the next launch's state (every program of this one has taken its ticket and arrived)
        tl.atomic_xchg(arrive_ptr, 0, sem="relaxed")
        tl.atomic_xchg(fbcnt_ptr, 0, sem="relaxed")
        tl.atomic_xchg(fbcnt_ptr + 1, 0, sem="relaxed")
        tl.atomic_xchg(done_ptr, 0, sem="relaxed")
        tl.atomic_xchg(tk_ptr, 0, sem="relaxed")


@triton.jit
def _certified_tail_kernel(ck_ptr, clb_ptr, ci_ptr, blb_ptr, brest_ptr, x_ptr, w_ptr, sel_ptr, val_ptr, lbs_ptr, obl_ptr,
                           cnt_ptr, fbrow_ptr, fbcnt_ptr, done_ptr, tk_ptr, part_ptr, arrive_ptr, st_ptr, ov_ptr, oi_ptr,
                           C, NB, R, RT, N, M, G, stride_xm, stride_wn,
                           K: tl.constexpr, BKK: tl.constexpr, S: tl.constexpr, CP: tl.constexpr,
                           NBP: tl.constexpr, RP: tl.constexpr, KOUT: tl.constexpr, KP: tl.constexpr,
                           BLK: tl.constexpr, MAXB: tl.constexpr,
                           BN: tl.constexpr, BK: tl.constexpr, GC: tl.constexpr, FB: tl.constexpr,
                           F32: tl.constexpr, DOT: tl.constexpr):
    """Both launches in one (grid ``M S + G``): each program takes a ticket as it starts; tickets
    below ``M S`` are the (row, split) programs of launch 1, the last G the fallback programs,
    which first wait until every row's verdict is published. They only wait on programs that
    took a lower ticket, i.e. that are already running, so the wait cannot deadlock."""
    t = tl.atomic_add(tk_ptr, 1, sem="relaxed")  # a role only: ``done_ptr`` carries the ordering
    if t < M * S:
        _certify_rescore((t // S).to(tl.int64), t % S, ck_ptr, clb_ptr, ci_ptr, blb_ptr, brest_ptr, x_ptr, w_ptr,
                         sel_ptr, val_ptr, lbs_ptr, obl_ptr, cnt_ptr, fbrow_ptr, fbcnt_ptr, done_ptr, st_ptr, ov_ptr,
                         oi_ptr, C, NB, R, RT, N, M, stride_xm, stride_wn, K, BKK, S, CP, NBP, RP, KOUT, KP, BLK, MAXB,
                         DOT)
    else:
        seen = tl.atomic_add(done_ptr, 0, sem="acquire")
        while seen < M:
            seen = tl.atomic_add(done_ptr, 0, sem="acquire")
        _full(t - M * S, G, ck_ptr, ci_ptr, x_ptr, w_ptr, fbrow_ptr, fbcnt_ptr, done_ptr, tk_ptr, part_ptr,
              arrive_ptr, ov_ptr, oi_ptr, C, N, M, stride_xm, stride_wn, K, BN, BK, KOUT, KP, GC, FB, F32, DOT)


class _Scratch:
    """Per-device counters every call leaves at zero: rescore arrivals [M], fallback counts (rows
    scored in full, wide rows), fallback-program arrivals, published verdicts, tickets."""

    def __init__(self, device: torch.device, m: int):
        self.buf = torch.zeros(max(m, 64) + 5, dtype=torch.int32, device=device)
        self.m = max(m, 64)

    @property
    def rescore(self) -> torch.Tensor:
        return self.buf[: self.m]

    @property
    def fb_count(self) -> torch.Tensor:
        return self.buf[self.m: self.m + 2]

    @property
    def arrive(self) -> torch.Tensor:
        return self.buf[self.m + 2: self.m + 3]

    @property
    def done(self) -> torch.Tensor:
        return self.buf[self.m + 3: self.m + 4]

    @property
    def ticket(self) -> torch.Tensor:
        return self.buf[self.m + 4:]


_SCRATCH: dict[torch.device, _Scratch] = {}


def _scratch(device: torch.device, m: int) -> _Scratch:
    return device_state(_SCRATCH, device, m, _Scratch, lambda sc: sc.m)


def certified_select_rerank(cand_key: torch.Tensor, cand_lb: torch.Tensor, cand_idx: torch.Tensor,
                            block_lb: torch.Tensor, block_rest: torch.Tensor, x: torch.Tensor,
                            weight: torch.Tensor, k: int, cap: int, block: int, stats: torch.Tensor
                            ) -> tuple[torch.Tensor, torch.Tensor]:
    """The exact top-``k`` of every row of ``x [M, K]`` against the dense ``weight [N, K]``:
    (values fp32 [M, k] descending, indices int64 [M, k]; ties to the lower index).

    Inputs: the certified coarse pass's outputs (``cand_*`` [M, C], ``block_*`` [M, NB], blocks
    of ``block`` tokens), the cap ``cap`` on the certified set rescored by the row's programs
    (with more, all the row's candidates are rescored by the fallback programs below
    ``FULL_DOT_MIN_M`` rows, else the whole row, as where a block may hide a member; a row's up
    to ``MAX_RESCAN_BLOCKS`` blocks that may hide members are rescored whole besides), and
    ``stats`` (int64 ``CERTIFIED_STATS``, accumulated in place). ``1 <= k <= CERTIFIED_MAX_K``;
    the caller validates shapes. Triton only; no host synchronization."""
    m, c = cand_key.shape
    nb = block_lb.shape[1]
    n, kk = weight.shape
    if x.stride(1) != 1:
        x = x.contiguous()
    if weight.stride(1) != 1:
        weight = weight.contiguous()
    dev = x.device
    r = max(1, min(cap, c))
    kp = max(2, pow2(k))  # tl.topk of k = 1 reduces to a scalar (Triton 3.6): keep k >= 2
    sc = _scratch(dev, m)
    rt = r + MAX_RESCAN_BLOCKS * block  # a row's rescored tokens: candidates, then whole blocks
    sel = torch.empty(m, rt, dtype=torch.int32, device=dev)
    fb_rows = torch.empty(m, dtype=torch.int32, device=dev)
    vals = torch.empty(m, rt, dtype=torch.float32, device=dev)
    lbs = torch.empty(m, r, dtype=torch.float32, device=dev) if k > 1 else vals  # k = 1 never touches it
    obl = torch.empty(m, MAX_RESCAN_BLOCKS, dtype=torch.int32, device=dev)
    out_v = torch.empty(m, k, dtype=torch.float32, device=dev)
    out_i = torch.empty(m, k, dtype=torch.int64, device=dev)
    cp = max(kp, pow2(c))
    bkk = min(4096, pow2(kk))
    g = max(1, min(FULL_PROGRAMS, -(-n // FULL_BN)))
    part = torch.empty(m * g * kp, dtype=torch.int64, device=dev)
    rp = max(kp, pow2(rt))
    # the fallback's dot: exact products on the tensor cores for two bf16 / two fp16 operands
    f32 = interpret_mode() or x.dtype != weight.dtype or x.dtype == torch.float32
    full = dict(BN=max(FULL_BN, kp), BK=32, GC=min(pow2(g), max(1, 1024 // kp)), FB=16, F32=f32,
                DOT=m >= FULL_DOT_MIN_M)
    _certified_tail_kernel[(m * RESCORE_SPLIT + g,)](
        cand_key, cand_lb, cand_idx, block_lb, block_rest, x, weight, sel, vals, lbs, obl, sc.rescore, fb_rows,
        sc.fb_count, sc.done, sc.ticket, part, sc.arrive, stats, out_v, out_i, c, nb, r, rt, n, m, g, x.stride(0),
        weight.stride(0), K=kk, BKK=bkk, S=RESCORE_SPLIT, CP=cp, NBP=max(kp, pow2(nb)), RP=rp, KOUT=k, KP=kp,
        BLK=block, MAXB=MAX_RESCAN_BLOCKS, **full,
        num_warps=8 if max(cp, bkk) >= 2048 else 4)
    return out_v, out_i


__all__ = ["certified_select_rerank"]
