"""Packed-half GEMV over a re-tiled copy of the codes: one thread per token row, coalesced loads.

Why: the wide packed-half GEMV (``triton_h2.py``) shares each token row between four threads (one
16-byte vector each per K step) because the plane-split layout stores a row's bytes contiguously:
with one thread per row a warp's 16-byte load touches 32 rows 16 bytes each, and the H200 then
reads at ~2.3 TB/s at most (``scripts/probe_stream.py``). Four threads per row fix the read but
pay the per-(row, plane, step) work — zero point, group scale, the fp16 sums, widening — four
times for 16 codes each: the kernel ends instruction-bound at ~2.9 instructions per code.

Here the codes are re-tiled once, per packing (:func:`retile`), so that for every 32-row block
and K step the 32 rows' words sit next to each other:

* words ``[NR, NS, 4 (v), 32 (r), 4 (w)]`` int32: ``words[b, s, v, r, w]`` is word ``16 s + 4 v
  + w`` of token row ``32 b + r`` (zero past the row's words or past N). A warp's load of vector
  ``v`` reads 32 rows x 16 bytes = 512 contiguous bytes, and one thread owns all 16 words (64
  bytes per plane: one g64 group) of its row per step;
* scale / zero ``[NR, NG, 32]``: the 32 rows' group-g values contiguous (one 64-byte / 32-byte
  load per warp instead of 32 scattered ones).

A thread then decodes and multiplies its 16 words in place (the ``triton_h2`` pair decode:
``lop3`` -> ``1024 + q 2^e``, ``sub.f16x2`` the zero pair, ``fma.rn.f16x2`` the x pair), sums
them in fp16 (15 pair adds), widens once and applies the group scale once per (plane, step):
the per-group work is spread over 64 codes instead of 16. The x pairs are the wide step's
(``_x_pairs_kernel`` with ``WIDE``); a half's partial sum holds 32 products of at most
``qmax LIMIT = 512``: at most 16384, inside fp16.

Memory: the re-tiled copy is as large as the packed codes plus scales (it is built lazily, only
for the fast-mode M = 1 path on a Triton device, and kept by the packing). Fast mode only, like
``triton_h2`` (fp16 rounding is outside the certified bound's proof); groups must be multiples
of 64 (a K step is one group of each plane).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from lowbit._backend import interpret_mode, sm_count
from lowbit.ops.coarse_head.triton import KIND_DONE, _epilogue
from lowbit.ops.coarse_head.triton_h2 import _STEP_WORDS, _h2_add, _h2_fma, _h2_sum, _limit, _x_pairs_kernel

#: token rows per tile of the re-tiled layout (one warp's lanes)
ROWS = 32


def retile(packed: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor):
    """Re-tile the INTx plane-split tensors for :func:`coarse_gemv_rt` (layouts in the module
    docstring). ``packed`` uint8 [N, L] (L % 4 == 0), ``scale`` fp16 / ``zero`` uint8 [N, NG].
    Returns (words int32 [NR, NS, 4, 32, 4], scale [NR, NG, 32], zero [NR, NG, 32]) on the same
    device, NR = ceil(N / 32), NS = ceil(L / 64)."""
    n, ell = packed.shape
    if ell % 4:
        raise ValueError(f"retile: the packed rows must hold whole int32 words, got L = {ell}")
    nr = -(-n // ROWS)
    ns = -(-(ell // 4) // _STEP_WORDS)
    words = torch.zeros(nr * ROWS, ns * _STEP_WORDS, dtype=torch.int32, device=packed.device)
    words[:n, : ell // 4] = packed.contiguous().view(torch.int32)
    # [NR, 32 (r), NS, 4 (v), 4 (w)] -> [NR, NS, 4 (v), 32 (r), 4 (w)]
    words = words.view(nr, ROWS, ns, 4, 4).permute(0, 2, 3, 1, 4).contiguous()

    def rows_last(t):
        out = torch.zeros(nr * ROWS, t.shape[1], dtype=t.dtype, device=t.device)
        out[:n] = t
        return out.view(nr, ROWS, t.shape[1]).transpose(1, 2).contiguous()

    return words, rows_last(scale), rows_last(zero)


@triton.jit
def _sum16(a16, BN: tl.constexpr, INTERPRET: tl.constexpr):
    """[BN, 4, 4] int32 fp16 pairs -> [BN] their pairwise fp16 sum (in-thread: 15 pair adds)."""
    a, b = tl.split(tl.reshape(a16, [BN, 8, 2]))
    a, b = tl.split(tl.reshape(_h2_add(a, b, INTERPRET), [BN, 4, 2]))
    a, b = tl.split(tl.reshape(_h2_add(a, b, INTERPRET), [BN, 2, 2]))
    a, b = tl.split(_h2_add(a, b, INTERPRET))
    return _h2_add(a, b, INTERPRET)


@triton.jit
def _split16(t, BN: tl.constexpr):
    """[BN, 4, 4] -> its 16 [BN] slices in word order (in-thread: no data movement)."""
    a, b = tl.split(tl.reshape(t, [BN, 8, 2]))  # words 0, 2, .. / 1, 3, ..
    a0, a1 = tl.split(tl.reshape(a, [BN, 4, 2]))  # 0 4 8 12 / 2 6 10 14
    b0, b1 = tl.split(tl.reshape(b, [BN, 4, 2]))  # 1 5 9 13 / 3 7 11 15
    a00, a01 = tl.split(tl.reshape(a0, [BN, 2, 2]))  # 0 8 / 4 12
    a10, a11 = tl.split(tl.reshape(a1, [BN, 2, 2]))  # 2 10 / 6 14
    b00, b01 = tl.split(tl.reshape(b0, [BN, 2, 2]))  # 1 9 / 5 13
    b10, b11 = tl.split(tl.reshape(b1, [BN, 2, 2]))  # 3 11 / 7 15
    w0, w8 = tl.split(a00)
    w4, w12 = tl.split(a01)
    w2, w10 = tl.split(a10)
    w6, w14 = tl.split(a11)
    w1, w9 = tl.split(b00)
    w5, w13 = tl.split(b01)
    w3, w11 = tl.split(b10)
    w7, w15 = tl.split(b11)
    return w0, w1, w2, w3, w4, w5, w6, w7, w8, w9, w10, w11, w12, w13, w14, w15


@triton.jit
def _chain_fma(acc, w, wh, mask, zero, xa, xb, INTERPRET: tl.constexpr):
    """acc + both byte pairs of one word (two chained pair FMAs)."""
    return _h2_fma(_h2_fma(acc, w, mask, zero, xa, INTERPRET), wh, mask, zero, xb, INTERPRET)


@triton.jit
def _dot16_chain(b_w, b_wh, mask, zero, x_a, x_b, BN: tl.constexpr, INTERPRET: tl.constexpr):
    """The 16 words' pair products summed as two FMA chains (even / odd words) and one add,
    instead of 16 independent products and a 15-add tree: 15 fewer instructions per (row,
    plane, step)."""
    w0, w1, w2, w3, w4, w5, w6, w7, w8, w9, w10, w11, w12, w13, w14, w15 = _split16(b_w, BN)
    h0, h1, h2, h3, h4, h5, h6, h7, h8, h9, h10, h11, h12, h13, h14, h15 = _split16(b_wh, BN)
    a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15 = _split16(x_a, 1)
    c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11, c12, c13, c14, c15 = _split16(x_b, 1)
    z = zero
    e = _chain_fma(tl.zeros([BN], dtype=tl.int32), w0, h0, mask, z, a0, c0, INTERPRET)
    o = _chain_fma(tl.zeros([BN], dtype=tl.int32), w1, h1, mask, z, a1, c1, INTERPRET)
    e = _chain_fma(e, w2, h2, mask, z, a2, c2, INTERPRET)
    o = _chain_fma(o, w3, h3, mask, z, a3, c3, INTERPRET)
    e = _chain_fma(e, w4, h4, mask, z, a4, c4, INTERPRET)
    o = _chain_fma(o, w5, h5, mask, z, a5, c5, INTERPRET)
    e = _chain_fma(e, w6, h6, mask, z, a6, c6, INTERPRET)
    o = _chain_fma(o, w7, h7, mask, z, a7, c7, INTERPRET)
    e = _chain_fma(e, w8, h8, mask, z, a8, c8, INTERPRET)
    o = _chain_fma(o, w9, h9, mask, z, a9, c9, INTERPRET)
    e = _chain_fma(e, w10, h10, mask, z, a10, c10, INTERPRET)
    o = _chain_fma(o, w11, h11, mask, z, a11, c11, INTERPRET)
    e = _chain_fma(e, w12, h12, mask, z, a12, c12, INTERPRET)
    o = _chain_fma(o, w13, h13, mask, z, a13, c13, INTERPRET)
    e = _chain_fma(e, w14, h14, mask, z, a14, c14, INTERPRET)
    o = _chain_fma(o, w15, h15, mask, z, a15, c15, INTERPRET)
    return _h2_add(e, o, INTERPRET)


@triton.jit
def _rt_plane_step(acc, b_w, b_wh, p_x2, s_ptr, z_ptr, o_b, o_r, m_n, g, NG, j: tl.constexpr,
                   SHIFT: tl.constexpr, MASK: tl.constexpr, BN: tl.constexpr, CHAIN: tl.constexpr,
                   INTERPRET: tl.constexpr):
    """Plane ``j`` of one K step: ``b_w`` / ``b_wh = b_w >> 8`` int32 [BN, 4, 4] (the step's 16
    words of each row, one row per thread), ``g`` the step's group of this plane; returns
    ``acc`` [BN] + the scaled group dot."""
    M2: tl.constexpr = (MASK << (SHIFT * j)) * 0x10001
    p_g = (o_b * NG + g) * 32 + o_r  # [BN]: row r's group g in the re-tiled scale / zero
    b_z = tl.load(z_ptr + p_g, mask=m_n, other=0).to(tl.int32)
    zero = (0x6400 | (b_z << (SHIFT * j))) * 0x10001  # [BN] fp16 pair 1024 + z 2^(SHIFT j)
    o_t = (4 * tl.arange(0, 4)[:, None] + tl.arange(0, 4)[None, :])[None, :, :]  # [1, 4, 4] word of the step
    x_a = tl.load(p_x2 + o_t)  # bytes (0, 2) of the step's 16 words, the same for every row
    x_b = tl.load(p_x2 + 16 + o_t)  # bytes (1, 3)
    if CHAIN:
        d16 = _dot16_chain(b_w, b_wh, tl.full([BN], M2, tl.int32), zero, x_a, x_b, BN, INTERPRET)
    else:
        mask = tl.full(b_w.shape, M2, tl.int32)
        a16 = _h2_fma(tl.zeros(b_w.shape, dtype=tl.int32), b_w, mask, zero[:, None, None], x_a, INTERPRET)
        a16 = _h2_fma(a16, b_wh, mask, zero[:, None, None], x_b, INTERPRET)
        d16 = _sum16(a16, BN, INTERPRET)
    b_sc = tl.load(s_ptr + p_g, mask=m_n, other=0.0).to(tl.float32)
    return acc + _h2_sum(d16, INTERPRET) * b_sc


@triton.jit
def _rt_block(i_n, i_m, x2_ptr, alpha_ptr, w_ptr, s_ptr, z_ptr, ck_ptr, ci_ptr, lg_ptr, M, N, NB, NR,
              L: tl.constexpr, NS: tl.constexpr, NG: tl.constexpr, P: tl.constexpr, SHIFT: tl.constexpr,
              MASK: tl.constexpr, G: tl.constexpr, BN: tl.constexpr, KCAND: tl.constexpr,
              WRITE_LOGITS: tl.constexpr, CG: tl.constexpr, CHAIN: tl.constexpr, INTERPRET: tl.constexpr):
    """Token block ``i_n`` (BN rows: BN / 32 re-tiled row tiles, one row per thread) against row
    ``i_m`` of x: per K step a [BN, 4, 4] word tile, the next step's tile loaded before this one
    is decoded; then the shared epilogue (candidates, optional logits)."""
    o_n = i_n * BN + tl.arange(0, BN)
    m_n = o_n < N
    o_b = o_n // 32
    o_r = o_n % 32
    m_w = (o_b < NR)[:, None, None]
    # [BN, 4 (v), 4 (w)] offsets of step 0: 16-byte vectors, rows of a tile 16 bytes apart
    o_vw = (tl.arange(0, 4)[:, None] * 128 + tl.arange(0, 4)[None, :])[None, :, :]
    p_w = w_ptr + (o_b * (NS * 512) + o_r * 4)[:, None, None] + o_vw
    p_x2 = x2_ptr + i_m * (P * NS * 32)
    acc = tl.zeros([BN], dtype=tl.float32)
    if CG:
        b_next = tl.load(p_w, mask=m_w, other=0, cache_modifier=".cg")
    else:
        b_next = tl.load(p_w, mask=m_w, other=0)
    for i_s in range(0, NS):
        b_cur = b_next
        m_nx = m_w & (i_s + 1 < NS)  # no step past the last
        if CG:
            b_next = tl.load(p_w + (i_s + 1) * 512, mask=m_nx, other=0, cache_modifier=".cg")
        else:
            b_next = tl.load(p_w + (i_s + 1) * 512, mask=m_nx, other=0)
        b_h = b_cur >> 8
        for j in tl.static_range(P):
            g = (j * L + 64 * i_s) // G
            acc = _rt_plane_step(acc, b_cur, b_h, p_x2 + (j * NS + i_s) * 32, s_ptr, z_ptr, o_b, o_r, m_n, g, NG,
                                 j, SHIFT, MASK, BN, CHAIN, INTERPRET)
    alpha = tl.load(alpha_ptr + i_m)
    row = (acc / alpha)[None, :]  # [1, BN]
    o_m = i_m + tl.arange(0, 1)
    _epilogue(row, row, s_ptr, s_ptr, z_ptr, s_ptr, ck_ptr, ck_ptr, ci_ptr, ck_ptr, ck_ptr, lg_ptr,
              o_m, o_m < M, o_n, m_n, i_n, M, N, NB, 0, 0.0, 0.0, 0.0,
              NG, KIND_DONE, 0, False, 0.0, WRITE_LOGITS, KCAND, 16, BN)


@triton.jit(do_not_specialize=["M", "N", "NB", "NR"])
def _coarse_gemv_rt_kernel(
    x2_ptr, alpha_ptr, w_ptr, s_ptr, z_ptr,
    ck_ptr, ci_ptr, lg_ptr,
    M, N, NB, NR,
    L: tl.constexpr, NS: tl.constexpr, NG: tl.constexpr, P: tl.constexpr, SHIFT: tl.constexpr,
    MASK: tl.constexpr, G: tl.constexpr, BN: tl.constexpr, KCAND: tl.constexpr,
    WRITE_LOGITS: tl.constexpr, CG: tl.constexpr, CHAIN: tl.constexpr, PERSIST: tl.constexpr,
    INTERPRET: tl.constexpr,
):
    """Grid (programs, M). PERSIST: persistent along the tokens, program p takes blocks p,
    p + programs, ... (:func:`_rt_block`) and the launcher sizes the grid to what the GPU holds at
    once; else one program per block."""
    i_m = tl.program_id(1).to(tl.int64)
    step = tl.num_programs(0)
    if not PERSIST:  # one program per token block: no loop (ptxas allocates and schedules it apart)
        _rt_block(tl.program_id(0).to(tl.int64), i_m, x2_ptr, alpha_ptr, w_ptr, s_ptr, z_ptr, ck_ptr, ci_ptr, lg_ptr,
                  M, N, NB, NR, L, NS, NG, P, SHIFT, MASK, G, BN, KCAND, WRITE_LOGITS, CG, CHAIN, INTERPRET)
    elif INTERPRET:
        i_n = tl.program_id(0).to(tl.int64)
        while i_n < NB:
            _rt_block(i_n, i_m, x2_ptr, alpha_ptr, w_ptr, s_ptr, z_ptr, ck_ptr, ci_ptr, lg_ptr, M, N, NB, NR,
                      L, NS, NG, P, SHIFT, MASK, G, BN, KCAND, WRITE_LOGITS, CG, CHAIN, INTERPRET)
            i_n += step
    else:
        for i_n in range(tl.program_id(0), NB, step):
            _rt_block(i_n.to(tl.int64), i_m, x2_ptr, alpha_ptr, w_ptr, s_ptr, z_ptr, ck_ptr, ci_ptr, lg_ptr, M, N,
                      NB, NR, L, NS, NG, P, SHIFT, MASK, G, BN, KCAND, WRITE_LOGITS, CG, CHAIN, INTERPRET)


#: compiled kernel (its constexprs) -> CTAs one SM holds at once (from its registers / shared memory)
_RESIDENT: dict[tuple, int] = {}
#: Per INTx bits: (CHAIN: FMA-chain sums, else the add tree; PERSIST: the persistent grid).
#: H200, scripts/bench_retiled.py, 124160 x 5120 g64 block 128, fast argmax (the coarse pass
#: alone in brackets), against the wide GEMV of triton_h2 in the same run
#: (docs/measurements/2026-12-01_bench_retiled_round{1,2}.json):
#:   INT2 tree + persistent 111.7 us (99.1) vs wide 124.3 (111.9); one program a block 110-129,
#:     chain 126-143 (the tree takes fewer registers' worth of live chains across 4 planes);
#:   INT4 tree, one program a block 159.1 (146.2) vs wide 175.6 (163.1) in round 1; ~equal
#:     (168-171) in round 2;
#:   INT8 chain, one program a block 178.3 (168.4, 1.07x its byte floor) vs wide 307.2 (294.5);
#:     the persistent loop costs INT8 ~15-40% (196-260 us).
#: M = 2 (two programs per block): INT2 191-196 vs the band kernel's 241; INT4 237-245 vs 265;
#: INT8 315 vs 350-359. M >= 3 loses to the band kernels (it reads the codes once per row).
RT_CONFIGS = {2: (False, True), 4: (False, False), 8: (True, False)}
#: overrides of RT_CONFIGS (None: the table), for A/B timing
CHAIN = None
PERSISTENT = None


def _resident(kernel, threads: int) -> int:
    """CTAs per SM for a compiled kernel: min of the register file, shared memory and 32 CTAs."""
    regs = max(1, kernel.n_regs) * threads
    by_regs = 65536 // regs
    shared = max(1, kernel.metadata.shared)
    by_smem = (227 * 1024) // shared
    return max(1, min(32, by_regs, by_smem))


def rt_supported(group_size: int, block: int, ell: int) -> bool:
    """Whether :func:`coarse_gemv_rt` takes this shape: g64-multiple groups, blocks of whole
    32-row tiles (up to 256 rows: one to eight warps), whole int32 words per row."""
    return group_size % 64 == 0 and block % ROWS == 0 and 32 <= block <= 256 and ell % 4 == 0


def coarse_gemv_rt(x, words, s, z, *, n, ell, bits, group_size, block, kcand, write_logits, cg=True, chain=None,
                   persist=None):
    """Launch the re-tiled packed-half GEMV (fast mode). ``x`` [M, K] (unit stride along K);
    ``words`` / ``s`` / ``z`` from :func:`retile` of the INTx codes ``[N, ell]`` (bytes per
    row), scale and zero. Returns the six ``CoarseOut`` tensors (certified outputs empty)."""
    m, k = x.shape
    p = 8 // bits
    lw = ell // 4
    ns = words.shape[1]
    ng = s.shape[1]
    dev = x.device
    x2 = torch.empty(m, p * ns * 32, dtype=torch.int32, device=dev)
    alpha = torch.empty(m, dtype=torch.float32, device=dev)
    _x_pairs_kernel[(m,)](x, x2, alpha, x.stride(0), K=k, L=ell, LW=lw, NS=ns, P=p, SHIFT=bits,
                          LIMIT=_limit(bits), BLK=1024, WIDE=True, num_warps=4)
    nb = -(-n // block)
    c = nb * kcand
    cand_key = torch.empty(m, c, dtype=torch.float32, device=dev)
    cand_idx = torch.empty(m, c, dtype=torch.int64, device=dev)
    logits = torch.empty(m if write_logits else 0, n, dtype=torch.float32, device=dev)
    empty = torch.empty(0, c, dtype=torch.float32, device=dev)
    # distinct empty outputs: a custom op's outputs may not alias each other
    empty_lb = torch.empty(0, nb, dtype=torch.float32, device=dev)
    empty_rest = torch.empty(0, nb, dtype=torch.float32, device=dev)
    t_chain, t_persist = RT_CONFIGS[bits]
    chain = (t_chain if CHAIN is None else CHAIN) if chain is None else chain
    persist = (t_persist if PERSISTENT is None else PERSISTENT) if persist is None else persist
    meta = dict(L=ell, NS=ns, NG=ng, P=p, SHIFT=bits, MASK=(1 << bits) - 1, G=group_size, BN=block,
                KCAND=kcand, WRITE_LOGITS=write_logits, CG=cg, CHAIN=chain, PERSIST=persist,
                INTERPRET=interpret_mode(), num_warps=block // ROWS, num_stages=1)
    key = (str(dev), *meta.items())
    if not persist:
        programs = nb
    elif interpret_mode():
        programs = min(nb, 2)  # the persistent loop runs (and is tested) under the interpreter too
    elif key in _RESIDENT:
        # all programs resident at once: every SM gets the same number of blocks (+- 1)
        programs = min(nb, max(1, _RESIDENT[key] * sm_count(dev, interpret=2) // m))
    else:
        programs = nb  # first call: one program per block; the compiled kernel gives the residency
    k = _coarse_gemv_rt_kernel[(programs, m)](x2, alpha, words, s, z, cand_key, cand_idx, logits,
                                               m, n, nb, words.shape[0], **meta)
    if persist and not interpret_mode() and key not in _RESIDENT and hasattr(k, "n_regs"):
        _RESIDENT[key] = _resident(k, block)
    return cand_key, empty, cand_idx, empty_lb, empty_rest, logits


__all__ = ["ROWS", "coarse_gemv_rt", "retile", "rt_supported"]
