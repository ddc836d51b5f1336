"""The int8-wgmma coarse pass's block epilogue (Gluon; used by both kernels of ``wgmma_int8.py``):
a row block's logits from its accumulator (:func:`block_logits`), then the block's ``KCAND`` best
keys and their tokens for every row of x (:func:`emit_candidates`) -- by sorted per-thread heads
(:func:`_sorted_heads_rounds`) or successive max-and-mask rounds (:func:`_max_and_mask`), over the
keys' order-preserving int32 bits (:func:`_ordered_bits`) or the fp32 keys. Ties go to the lower
token; the contract is the other coarse kernels' fast-mode candidates. Tested on the GPU tier
against the per-block reference (tests/ops/test_coarse_wgmma.py) and, as a torch mirror of the
rounds, on the CPU."""
from __future__ import annotations

try:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl

    GLUON_ERROR = None
except Exception as e:  # noqa: BLE001 - any failure means "no Gluon path"
    GLUON_ERROR = e

if GLUON_ERROR is None:
    _ORD_NEG_INF = gl.constexpr(-2139095041)  # _ordered_bits(-inf)

    @gluon.jit
    def block_logits(acc, sx, r_ptr, row0, N, R: gl.constexpr, mma: gl.constexpr, TABLE: gl.constexpr):
        """fp32 [R, NB]: a row block's coarse logits from its accumulator -- times ``sx`` (x's
        per-row scales), and for the whole-row variant (int32 sums) also the rows' units ``r``."""
        if TABLE:
            rows = row0 + gl.arange(0, R, layout=gl.SliceLayout(1, mma))
            r = gl.load(r_ptr + rows, mask=rows < N, other=0.0)
            out = acc.to(gl.float32) * gl.expand_dims(r, 1) * gl.expand_dims(sx, 0)
        else:
            out = acc * gl.expand_dims(sx, 0)
        return out

    @gluon.jit
    def emit_candidates(out, row0, pid, ck_ptr, ci_ptr, lg_ptr, M, N, NBLK, NB: gl.constexpr, W: gl.constexpr,
                        KCAND: gl.constexpr, WRITE_LOGITS: gl.constexpr, SUB: gl.constexpr = 1):
        """The KCAND best keys of every row m < M in each of the program's SUB candidate blocks
        (``16 W / SUB`` tokens each; candidate block ``pid SUB + s``, ``NBLK`` of them in all) from
        its logits ``out`` fp32 [16 W, NB] (and the logits themselves if WRITE_LOGITS): the tile
        re-laid out with each row of x in one warp (tokens along its lanes and registers), so the
        reductions along tokens stay inside it. One block a program: over the keys' int32 bits
        (a round's maximum is one warp ``redux.sync``), by ``_sorted_heads_rounds`` where the block
        is 128 tokens (fewer instructions than max-and-mask over every element), else by
        ``_max_and_mask``. Two blocks a program: max-and-mask over the fp32 keys along the token axis of [SUB, R /
        SUB, NB]."""
        R: gl.constexpr = 16 * W
        bl: gl.constexpr = gl.BlockedLayout([R // 32, 1], [32, 1], [1, W], [0, 1])
        key = gl.convert_layout(out, bl)
        tok = row0 + gl.arange(0, R, layout=gl.SliceLayout(1, bl))
        mrow = gl.arange(0, NB, layout=gl.SliceLayout(0, bl))
        tok2 = gl.expand_dims(tok, 1)
        m_ok = mrow < M
        if WRITE_LOGITS:
            gl.store(lg_ptr + gl.expand_dims(mrow, 0).to(gl.int64) * N + tok2, key,
                     mask=gl.expand_dims(m_ok, 0) & (tok2 < N))
        neg = float("-inf")
        key = gl.where(tok2 < N, key, neg)
        big = N + R
        if SUB == 1 and R == 128:
            _sorted_heads_rounds(key, tok2 + gl.expand_dims(mrow, 0) * 0, big, ck_ptr, ci_ptr, pid, M, NBLK, NB,
                                 KCAND)
        elif SUB == 1:
            o_c = mrow.to(gl.int64) * (NBLK * KCAND) + pid * KCAND
            _max_and_mask(key, tok2, big, ck_ptr, ci_ptr, o_c, m_ok, 0, KCAND, True)
        else:
            # [SUB, R / SUB, NB]: candidate block s holds tokens s R / SUB .. (s + 1) R / SUB - 1
            key3 = gl.reshape(key, [SUB, R // SUB, NB])
            tok3 = gl.reshape(tok2 + gl.expand_dims(mrow, 0) * 0, [SUB, R // SUB, NB])
            l2: gl.constexpr = gl.SliceLayout(1, key3.type.layout)  # [SUB, NB]
            sub = gl.expand_dims(pid * SUB + gl.arange(0, SUB, layout=gl.SliceLayout(1, l2)), 1)
            mcol = gl.expand_dims(gl.arange(0, NB, layout=gl.SliceLayout(0, l2)), 0)
            ok = (mcol < M) & (sub < NBLK)
            o_c = mcol.to(gl.int64) * (NBLK * KCAND) + sub * KCAND
            # float keys: over this layout's token axis the int32 form finds no warp redux (offline
            # sm_90, NB = 64: the same 256 SHFL, and 80-112 bytes of spills instead of 8)
            _max_and_mask(key3, tok3, big, ck_ptr, ci_ptr, o_c, ok, 1, KCAND, False)

    @gluon.jit
    def _split4(v):
        """[A, B, 4] (the last axis in registers) -> its 4 slices [A, B], in order."""
        a, b = gl.split(gl.reshape(v, [v.shape[0], v.shape[1], 2, 2]))  # a: 0, 2; b: 1, 3
        e0, e2 = gl.split(a)
        e1, e3 = gl.split(b)
        return e0, e1, e2, e3

    @gluon.jit
    def _order2(va, ta, vb, tb):
        """Compare-exchange of two (key, token) pairs: the better first (larger key, then lower token)."""
        sw = (vb > va) | ((vb == va) & (tb < ta))
        return gl.where(sw, vb, va), gl.where(sw, tb, ta), gl.where(sw, va, vb), gl.where(sw, ta, tb)

    @gluon.jit
    def _ordered_bits(key):
        """int32 whose signed order is the fp32 order of ``key`` (not NaN): the bits, with the
        magnitude bits of negatives flipped; -0.0 maps to +0.0's 0, so equal keys stay equal."""
        bits = gl.where(key == 0.0, 0, key.to(gl.int32, bitcast=True))
        return gl.where(bits < 0, bits ^ 0x7FFFFFFF, bits)

    @gluon.jit
    def _float_of_ordered(o):
        """The fp32 key of :func:`_ordered_bits`' int32 (the map is its own inverse on the bits)."""
        return gl.where(o < 0, o ^ 0x7FFFFFFF, o).to(gl.float32, bitcast=True)

    @gluon.jit
    def _sorted_heads_rounds(key, tok, big, ck_ptr, ci_ptr, pid, M, NBLK, NB: gl.constexpr, KCAND: gl.constexpr):
        """``_max_and_mask`` over a [128, NB] tile whose thread holds 4 consecutive tokens of a column
        (``emit_candidates``' layout), same keys and order: each thread first sorts its 4 (key,
        token) pairs (5 compare-exchanges, ties to the lower token), then every round reduces the
        threads' heads only and the winning thread pops its head (3 selects a value) -- instead of
        comparing and masking every element every round. Ties stay exact: a thread's head is its
        lowest token among its best keys, so the lowest token among the heads equal to the maximum
        is the lowest among all elements equal to it. The keys are their order-preserving int32
        bits (``_ordered_bits``) throughout, so a round's maximum is one warp ``redux.sync`` (as
        the lowest token's already is) instead of five shuffle-and-compare steps; the same picks
        (a zero key is stored as +0.0)."""
        key = _ordered_bits(key)
        neg = _ORD_NEG_INF
        k4 = gl.permute(gl.reshape(key, [32, 4, NB]), (0, 2, 1))  # [lane, column, register]
        t4 = gl.permute(gl.reshape(tok, [32, 4, NB]), (0, 2, 1))
        v0, v1, v2, v3 = _split4(k4)
        t0, t1, t2, t3 = _split4(t4)
        v0, t0, v1, t1 = _order2(v0, t0, v1, t1)
        v2, t2, v3, t3 = _order2(v2, t2, v3, t3)
        v0, t0, v2, t2 = _order2(v0, t0, v2, t2)
        v1, t1, v3, t3 = _order2(v1, t1, v3, t3)
        v1, t1, v2, t2 = _order2(v1, t1, v2, t2)
        mcol = gl.arange(0, NB, layout=gl.SliceLayout(0, v0.type.layout))
        o_c = mcol.to(gl.int64) * (NBLK * KCAND) + pid * KCAND
        ok = mcol < M
        for c in gl.static_range(KCAND):
            best = gl.max(v0, axis=0)
            loc = gl.min(gl.where(v0 == gl.expand_dims(best, 0), t0, big), axis=0)
            best = _float_of_ordered(best)
            gl.store(ck_ptr + o_c + c, best, mask=ok)
            gl.store(ci_ptr + o_c + c, gl.where(best == float("-inf"), 0, loc).to(gl.int64), mask=ok)
            win = t0 == gl.expand_dims(loc, 0)
            v0 = gl.where(win, v1, v0)
            v1 = gl.where(win, v2, v1)
            v2 = gl.where(win, v3, v2)
            v3 = gl.where(win, neg, v3)
            t0 = gl.where(win, t1, t0)
            t1 = gl.where(win, t2, t1)
            t2 = gl.where(win, t3, t2)
            t3 = gl.where(win, big, t3)

    @gluon.jit
    def _max_and_mask(key, tok, big, ck_ptr, ci_ptr, o_c, ok, AXIS: gl.constexpr, KCAND: gl.constexpr,
                      INTKEYS: gl.constexpr = False):
        """KCAND rounds of successive maxima of ``key`` along AXIS (its token axis; ``tok`` the
        tokens, ``big`` above all of them): round c stores the best key at ``ck_ptr + o_c + c`` and
        its token (ties to the lower; 0 where the key is -inf) at ``ci_ptr + o_c + c`` where ``ok``,
        then masks that token out. INTKEYS: over the keys' order-preserving int32 bits (a warp's
        maximum one ``redux.sync``, see ``_sorted_heads_rounds``)."""
        neg = float("-inf")
        if INTKEYS:
            key = _ordered_bits(key)
            neg = _ORD_NEG_INF
        for c in gl.static_range(KCAND):
            best = gl.max(key, axis=AXIS)
            loc = gl.min(gl.where(key == gl.expand_dims(best, AXIS), tok, big), axis=AXIS)
            if INTKEYS:
                kf = _float_of_ordered(best)
            else:
                kf = best
            gl.store(ck_ptr + o_c + c, kf, mask=ok)
            gl.store(ci_ptr + o_c + c, gl.where(kf == float("-inf"), 0, loc).to(gl.int64), mask=ok)
            key = gl.where(tok == gl.expand_dims(loc, AXIS), neg, key)
