"""Triton kernel for ``fp4_gemm``: FP8 activations x packed E2M1 weights (UE8M0 per 32), Hopper.

Hopper has no FP4 MMA, but every E2M1 value is exactly an E4M3 value, so the packed weight tile is
upcast in registers (a byte-permute table lookup, ``PRMT``) and fed to the FP8 tensor cores. The
weight scale changes every 32 along K per row, so it cannot simply be applied after a 128-wide dot.
Two steps per 128-wide K block exist:

* **aligned** (default): each row's four groups are shifted to the row's largest exponent of the
  block — group g is upcast to ``e2m1 * 2^-(e_max - e_g)``, exact in E4M3 while the shift is at
  most 8 — so the block is ONE 128-wide dot scaled by ``2^(e_max - 127) * a_s``, as in
  ``fp8_gemm``. A group more than 8 binades below its block's largest is left out of that dot and
  added exactly by a second pass over the tile, which runs only when the tile has such a group.
* **four dots** (``aligned=False``, the first design): four dependent 32-wide dots (32 is the
  wgmma K of FP8), each scaled by its own power of two.

Both are exact reorderings of the spec's ``acc += dot32 * a_s * b_s`` up to fp32 summation order.

The kernel always runs swap-AB (tile of ``C^T = B @ A^T``): the decoded weight is the register
operand and fills the MMA's M (64+ rows), the activation rows the narrow N — the right shape for
decode, where the op is bandwidth-bound on half the bytes of FP8.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from lowbit._backend import capability_at_least, interpret_mode
from lowbit.ops.act_quant.triton import _e8m0_decode
from lowbit.ops.fp8_gemm import triton as fp8_triton
from lowbit.ops.fp4_gemm import gluon_wgmma_gemv as _wgmma
from lowbit.ops.fp4_gemm.expand import fp4_weight_to_fp8
from lowbit.ops.fp8_gemm import triton_mma as _mma
from lowbit.ops.fp8_gemm.triton import GemmConfig, _load_scale, launch_gemm, split_range, store_tile, tile_coords


@triton.jit
def _e2m1_to_e4m3_bits(c):
    """E4M3 bit pattern (int32) of the E2M1 code c (int32 0..15): an exact re-encoding."""
    mag = c & 7
    bits = tl.where(mag >= 2, (mag << 2) + 0x30, mag * 0x30)
    return bits | ((c & 8) << 4)


# PTX of the byte-permute upcast: $2 holds 4 packed bytes (8 codes, code i in nibble i). PRMT
# looks up 4 magnitudes at once in the 8-byte table {0, 0.5, 1, 1.5, 2, 3, 4, 6} as E4M3
# (0x00 30 38 3C 40 44 48 4C); its selector is 4 nibbles in the low 16 bits, so the low (even)
# and high (odd) nibbles are first compacted into 16 bits each. A second PRMT in sign-replicate
# mode (selector bit 3 = the code's sign bit) over 0x80 bytes yields 0xFF for negative codes and
# 0x80 for positive ones; its bit 6, moved to bit 7, is the sign. $0 = E4M3 of the low nibbles,
# $1 = of the high nibbles, byte for byte. About 2.5 instructions per element vs ~10 for the
# per-element integer formula.
_UPCAST_PTX = tl.constexpr("""
{
.reg .b32 x, y, s, m, g, ta, tb, c8, z;
mov.b32 ta, 0x3C383000;
mov.b32 tb, 0x4C484440;
mov.b32 c8, 0x80808080;
mov.b32 z, 0;
and.b32 x, $2, 0x0F0F0F0F;
shr.u32 y, x, 4;
or.b32 x, x, y;
prmt.b32 x, x, z, 0x0020;
and.b32 s, x, 0x7777;
prmt.b32 m, ta, tb, s;
prmt.b32 g, c8, c8, x;
shl.b32 g, g, 1;
and.b32 g, g, 0x80808080;
or.b32 $0, m, g;
shr.u32 x, $2, 4;
and.b32 x, x, 0x0F0F0F0F;
shr.u32 y, x, 4;
or.b32 x, x, y;
prmt.b32 x, x, z, 0x0020;
and.b32 s, x, 0x7777;
prmt.b32 m, ta, tb, s;
prmt.b32 g, c8, c8, x;
shl.b32 g, g, 1;
and.b32 g, g, 0x80808080;
or.b32 $1, m, g;
}
""")


# The byte-permute upcast with per-element magnitude tables, two packed bytes (4 codes) per call:
# $2 holds bytes p0 (bits 0-7) and p1 (bits 8-15); $3 / $4 are the low table words (entries 0..3)
# of p0 / p1 and $5 / $6 the high words (entries 4..7) — inline_asm_elementwise passes an int32
# argument to pack=2 as 2 registers. Each byte is looked up in its own table, so nothing assumes
# which elements Triton's register layout puts in one call. PRMT's selector is 4 nibbles, and the
# low 16 bits of a byte pair (& 0x77 per byte) are exactly the 2 magnitudes of that byte; a PRMT in
# sign-replicate mode over 0x80 bytes yields 0xFF for negative codes, whose bit 6 moved to bit 7 is
# the sign. Out: $0 = E4M3 of the low nibbles (elements 2i) of p0, p1; $1 = of the high nibbles.
_UPCAST_TABLE_PTX = tl.constexpr("""
{
.reg .b32 s0, s1, m0, m1, m, g, c8, z;
mov.b32 c8, 0x80808080;
mov.b32 z, 0;
and.b32 s0, $2, 0x77;
prmt.b32 m0, $3, $5, s0;
shr.u32 s1, $2, 8;
and.b32 s1, s1, 0x77;
prmt.b32 m1, $4, $6, s1;
prmt.b32 m, m0, m1, 0x5410;
prmt.b32 g, c8, c8, $2;
shl.b32 g, g, 1;
and.b32 g, g, 0x80808080;
or.b32 m, m, g;
prmt.b32 $0, m, z, 0x0020;
prmt.b32 $1, m, z, 0x0031;
}
""")


@triton.jit
def _e2m1_table_bits(c, ta, tb):
    """E4M3 bits (int32) of E2M1 code c (int32 0..15) looked up in the 8-byte magnitude table
    (ta = bytes 0..3, tb = bytes 4..7), sign from bit 3: what _UPCAST_TABLE_PTX computes."""
    mag = c & 7
    t = tl.where(mag < 4, ta, tb)
    return ((t >> ((mag & 3) * 8)) & 0xFF) | ((c & 8) << 4)


@triton.jit
def _upcast_e2m1x2_table(p, ta, tb, ROWS: tl.constexpr, COLS: tl.constexpr, ASM: tl.constexpr):
    """Packed bytes [ROWS, COLS] + per-byte tables (int32 [ROWS, COLS], see _UPCAST_TABLE_PTX)
    -> float8e4nv [ROWS, 2 * COLS] (element 2i from the low nibble of byte i)."""
    if ASM:
        lo, hi = tl.inline_asm_elementwise(_UPCAST_TABLE_PTX, "=r,=r,r,r,r,r,r", [p, ta, tb],
                                           dtype=(tl.uint8, tl.uint8), is_pure=True, pack=2)
    else:
        q = p.to(tl.int32)
        lo = _e2m1_table_bits(q & 0xF, ta, tb).to(tl.uint8)
        hi = _e2m1_table_bits(q >> 4, ta, tb).to(tl.uint8)
    bits = tl.reshape(tl.join(lo, hi), (ROWS, 2 * COLS))
    return bits.to(tl.float8e4nv, bitcast=True)


@triton.jit
def shift_table_words(di):
    """(low, high) int32 words of the 8-byte magnitude table for shift di (int32 0..9): the rows of
    :func:`shift_tables`, computed in registers instead of read from memory (no table tensor, so
    nothing to upload before a CUDA-graph capture). Rows 0..5 are the unshifted bytes minus
    8 * d in every nonzero byte (E4M3 exponent - d, still normal); 6..8 reach the subnormals."""
    lo = tl.where(di < 6, 0x3C383000 - di * 0x08080800,
                  tl.where(di == 6, 0x0C080400, tl.where(di == 7, 0x06040200, tl.where(di == 8, 0x03020100, 0))))
    hi = tl.where(di < 8, 0x4C484440 - di * 0x08080808, tl.where(di == 8, 0x0C080604, 0))
    return lo, hi


@triton.jit
def _group_tables(di, BLOCK_N: tl.constexpr):
    """Per-byte magnitude tables for a [BLOCK_N, 64]-byte tile: di [BLOCK_N, 4] are the table rows
    (one per 32-wide group = 16 bytes); returns (ta, tb) int32 [BLOCK_N, 64]."""
    ta, tb = shift_table_words(di)
    ta = tl.reshape(tl.broadcast_to(ta[:, :, None], (BLOCK_N, 4, 16)), (BLOCK_N, 64))
    tb = tl.reshape(tl.broadcast_to(tb[:, :, None], (BLOCK_N, 4, 16)), (BLOCK_N, 64))
    return ta, tb


@triton.jit
def _scaled_wdot(b_w, b_a, s_w, s_a, SWAP_AB: tl.constexpr):
    """dot(W, A^T) * s_w[n] * s_a[m] as an accumulator tile: [BLOCK_N, BLOCK_M] under SWAP_AB (the
    decoded weight is the register A operand), else [BLOCK_M, BLOCK_N] (the weight goes through
    shared memory as the B operand and the activation rows pad the MMA's M)."""
    if SWAP_AB:
        return tl.dot(b_w, tl.trans(b_a)) * (s_w[:, None] * s_a[None, :])
    else:
        return tl.dot(b_a, tl.trans(b_w)) * (s_a[:, None] * s_w[None, :])


@triton.jit
def _fp4_block(kb, a_ptr, b_ptr, o_m, o_n, m_m, m_n, K):
    """Operands of 128 K block kb: activations e4m3 [BLOCK_M, 128], packed weights uint8 [BLOCK_N, 64]."""
    o_k = kb * 128 + tl.arange(0, 128)
    b_a = tl.load(a_ptr + o_m[:, None] * K + o_k[None, :], mask=m_m[:, None], other=0.0)
    o_p = kb * 64 + tl.arange(0, 64)
    b_p = tl.load(b_ptr + o_n[:, None] * (K // 2) + o_p[None, :], mask=m_n[:, None], other=0)
    return b_a, b_p


@triton.jit
def _fp4_scales(kb, as_ptr, bs_ptr, o_m, o_n, m_m, m_n, K, n_kb, AS_E8M0: tl.constexpr):
    """(a_s fp32 [BLOCK_M], the four 32-wide groups' UE8M0 exponents int32 [BLOCK_N, 4]) of K
    block kb, clamped to the last block. Called one iteration ahead (PREFETCH): plain loads are
    not software-pipelined by Triton, and loaded where they are used they stall every step."""
    kbc = tl.minimum(kb, n_kb - 1)
    s_a = _load_scale(as_ptr + o_m * n_kb + kbc, m_m, AS_E8M0)
    o_g = tl.arange(0, 4)
    e = tl.load(bs_ptr + o_n[:, None] * (K // 32) + kbc * 4 + o_g[None, :], mask=m_n[:, None], other=127).to(tl.int32)
    return s_a, e


@triton.jit
def _fp4_step_aligned(acc, far, kb, s_a, e, a_ptr, b_ptr, o_m, o_n, m_m, m_n, K,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ASM: tl.constexpr, SWAP_AB: tl.constexpr):
    """One 128 K block as ONE 128-wide FP8 dot: each weight row's four 32-wide groups are brought
    to the row's largest scale exponent e_max, i.e. group g is upcast to e2m1 * 2^-(e_max - e_g) —
    exact in E4M3 while that shift d <= 8 (the smallest magnitude, 0.5 * 2^-8 = 2^-9, is E4M3's
    smallest subnormal) — and the dot is scaled by 2^(e_max - 127) * a_s. Groups with d > 8 get a
    zero table here; ``far`` (the largest d seen) tells the kernel to add them in a second pass."""
    b_a, b_p = _fp4_block(kb, a_ptr, b_ptr, o_m, o_n, m_m, m_n, K)
    e_max = tl.max(e, 1)
    d = e_max[:, None] - e
    ta, tb = _group_tables(tl.minimum(d, 9), BLOCK_N)
    b_w = _upcast_e2m1x2_table(b_p, ta, tb, BLOCK_N, 64, ASM)
    acc = acc + _scaled_wdot(b_w, b_a, _e8m0_decode(e_max), s_a, SWAP_AB)
    return acc, tl.maximum(far, tl.max(tl.max(d, 1), 0))


@triton.jit
def _upcast_e2m1x2(p, ROWS: tl.constexpr, COLS: tl.constexpr, ASM: tl.constexpr):
    """Packed bytes [ROWS, COLS] (element 2i = low nibble) -> float8e4nv [ROWS, 2 * COLS].

    ASM: PRMT table lookup (GPU); otherwise per-element integer arithmetic (also the interpreter)."""
    if ASM:
        lo, hi = tl.inline_asm_elementwise(_UPCAST_PTX, "=r,=r,r", [p], dtype=(tl.uint8, tl.uint8), is_pure=True, pack=4)
    else:
        q = p.to(tl.int32)
        lo = _e2m1_to_e4m3_bits(q & 0xF).to(tl.uint8)
        hi = _e2m1_to_e4m3_bits(q >> 4).to(tl.uint8)
    bits = tl.reshape(tl.join(lo, hi), (ROWS, 2 * COLS))
    return bits.to(tl.float8e4nv, bitcast=True)


@triton.jit
def _fp4_step_far(acc, kb, a_ptr, as_ptr, b_ptr, bs_ptr, o_m, o_n, m_m, m_n, K, n_kb,
                  AS_E8M0: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ASM: tl.constexpr,
                  SWAP_AB: tl.constexpr):
    """The groups _fp4_step_aligned left out (d > 8) of block kb, exactly: one 32-wide dot per group
    over the rows where it is far (other rows' bytes zeroed), scaled by its own power of two. Runs
    only for tiles that have such a group (rare in real weights: a 32-wide group more than 256x
    below the largest scale of its 128 block), and in a loop of its own after the main one, so it
    costs the main loop no registers."""
    o_g = tl.arange(0, 4)
    e = tl.load(bs_ptr + o_n[:, None] * (K // 32) + kb * 4 + o_g[None, :], mask=m_n[:, None], other=127).to(tl.int32)
    e_max = tl.max(e, 1)
    if tl.max(e_max[:, None] - e) > 8:
        s_a = _load_scale(as_ptr + o_m * n_kb + kb, m_m, AS_E8M0)
        for j in tl.static_range(4):
            e_j = tl.sum(tl.where(o_g[None, :] == j, e, 0), 1)
            far_j = e_max - e_j > 8
            o_k = kb * 128 + j * 32 + tl.arange(0, 32)
            b_a = tl.load(a_ptr + o_m[:, None] * K + o_k[None, :], mask=m_m[:, None], other=0.0)
            o_p = kb * 64 + j * 16 + tl.arange(0, 16)
            b_p = tl.load(b_ptr + o_n[:, None] * (K // 2) + o_p[None, :], mask=m_n[:, None] & far_j[:, None], other=0)
            b_w = _upcast_e2m1x2(b_p, BLOCK_N, 16, ASM)
            # rows where group j is not far: bytes zeroed above and a zero scale (their own scale
            # may be 0xFF = NaN); a NaN activation makes the row NaN on the main path anyway
            acc = acc + _scaled_wdot(b_w, b_a, tl.where(far_j, _e8m0_decode(e_j), 0.0), s_a, SWAP_AB)
    return acc


@triton.jit
def _fp4_step(acc, kb, s_a, e, a_ptr, b_ptr, o_m, o_n, m_m, m_n, K,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ASM: tl.constexpr):
    """acc[BLOCK_N, BLOCK_M] += sum_j (dot(W_j, A_j^T) * 2^(e_j - 127)) * a_s over one 128 K block
    (e [BLOCK_N, 4]: the groups' UE8M0 exponents).

    The power-of-two weight scale is applied first (exact), then the activation scale in the same
    FMA, so no second accumulator tile is kept (register pressure)."""
    o_g = tl.arange(0, 4)
    for j in tl.static_range(4):
        o_k = kb * 128 + j * 32 + tl.arange(0, 32)
        # [BLOCK_M, 32] e4m3
        b_a = tl.load(a_ptr + o_m[:, None] * K + o_k[None, :], mask=m_m[:, None], other=0.0)
        o_p = kb * 64 + j * 16 + tl.arange(0, 16)
        # [BLOCK_N, 16] packed E2M1 -> [BLOCK_N, 32] e4m3
        b_p = tl.load(b_ptr + o_n[:, None] * (K // 2) + o_p[None, :], mask=m_n[:, None], other=0)
        b_w = _upcast_e2m1x2(b_p, BLOCK_N, 16, ASM)
        # [BLOCK_N] UE8M0 scale of this 32-wide block
        s_b = _e8m0_decode(tl.sum(tl.where(o_g[None, :] == j, e, 0), 1))
        acc = acc + (tl.dot(b_w, tl.trans(b_a)) * s_b[:, None]) * s_a[None, :]
    return acc


@triton.jit
def _fp4_iteration(acc, far, kb, s_a, e, a_ptr, as_ptr, b_ptr, bs_ptr, o_m, o_n, m_m, m_n, K, n_kb,
                   AS_E8M0: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ASM: tl.constexpr,
                   SWAP_AB: tl.constexpr, ALIGNED: tl.constexpr, PREFETCH: tl.constexpr):
    """One K block of the main loop: returns (acc, far, the scales to carry). PREFETCH: (s_a, e)
    were loaded one iteration ago and block kb + 1's are loaded now; otherwise block kb's are
    loaded here, where they are used."""
    if PREFETCH:
        s_a_n, e_n = _fp4_scales(kb + 1, as_ptr, bs_ptr, o_m, o_n, m_m, m_n, K, n_kb, AS_E8M0)
    else:
        s_a, e = _fp4_scales(kb, as_ptr, bs_ptr, o_m, o_n, m_m, m_n, K, n_kb, AS_E8M0)
        s_a_n, e_n = s_a, e
    if ALIGNED:
        acc, far = _fp4_step_aligned(acc, far, kb, s_a, e, a_ptr, b_ptr, o_m, o_n, m_m, m_n, K, BLOCK_M, BLOCK_N, ASM,
                                     SWAP_AB)
    else:
        acc = _fp4_step(acc, kb, s_a, e, a_ptr, b_ptr, o_m, o_n, m_m, m_n, K, BLOCK_M, BLOCK_N, ASM)
    return acc, far, s_a_n, e_n


@triton.jit(do_not_specialize=["M", "n_kb", "kb_per_split"])  # see _fp8_gemm_kernel
def _fp4_gemm_kernel(
    a_ptr, as_ptr, b_ptr, bs_ptr, out_ptr, M, N, K, n_kb, kb_per_split,
    AS_E8M0: tl.constexpr, SWAP_AB: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr, INTERPRET: tl.constexpr,
    ASM: tl.constexpr, ALIGNED: tl.constexpr, FAR: tl.constexpr, PREFETCH: tl.constexpr = True,
    guard_ptr=None, GUARD: tl.constexpr = False,
):
    """GUARD: every program first reads the int32 ``guard_ptr[0]`` and returns at once when it is 0
    (the re-encode path's exactness flag, :func:`_fp4_via_fp8`: the kernel then only fills in a
    result the FP8 GEMM could not give exactly, decided on the device)."""
    if GUARD:
        if tl.load(guard_ptr) == 0:
            return
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
    far = kb0 * 0  # largest scale shift seen inside a 128 block (aligned step)
    # the scales of the current block, carried through the loop (see _fp4_iteration)
    s_a, e = _fp4_scales(kb0, as_ptr, bs_ptr, o_m, o_n, m_m, m_n, K, n_kb, AS_E8M0)
    if INTERPRET:
        # see _fp8_gemm_kernel: range() over a runtime bound fails in the 3.6 interpreter
        kb = kb0
        while kb < kb1:
            acc, far, s_a, e = _fp4_iteration(acc, far, kb, s_a, e, a_ptr, as_ptr, b_ptr, bs_ptr, o_m, o_n, m_m, m_n, K,
                                              n_kb, AS_E8M0, BLOCK_M, BLOCK_N, ASM, SWAP_AB, ALIGNED, PREFETCH)
            kb += 1
        if FAR:
            if far > 8:
                kb = kb0
                while kb < kb1:
                    acc = _fp4_step_far(acc, kb, a_ptr, as_ptr, b_ptr, bs_ptr, o_m, o_n, m_m, m_n, K, n_kb,
                                        AS_E8M0, BLOCK_M, BLOCK_N, ASM, SWAP_AB)
                    kb += 1
    else:
        for kb in range(kb0, kb1):
            acc, far, s_a, e = _fp4_iteration(acc, far, kb, s_a, e, a_ptr, as_ptr, b_ptr, bs_ptr, o_m, o_n, m_m, m_n, K,
                                              n_kb, AS_E8M0, BLOCK_M, BLOCK_N, ASM, SWAP_AB, ALIGNED, PREFETCH)
        if FAR:
            # a second pass over the tile's K range, after the main loop so its registers are
            # not live during it; taken only when some group was more than 8 binades down
            if far > 8:
                for kb in range(kb0, kb1):
                    acc = _fp4_step_far(acc, kb, a_ptr, as_ptr, b_ptr, bs_ptr, o_m, o_n, m_m, m_n, K, n_kb,
                                        AS_E8M0, BLOCK_M, BLOCK_N, ASM, SWAP_AB)
    store_tile(out_ptr, acc, o_m, o_n, m_m, m_n, M, N, i_split, SWAP_AB)


# Launch configs by M band (first band with m <= max M wins): (max M, config, aligned step). The
# packed weight tile is [block_n, 64] bytes per 128-wide K block. Chosen by scripts/tune_gemm.py
# on the H200, cold L2 (docs/measurements/2026-11-29_tune_fp4_*.log, docs/gemm.md):
#   M 1, N7168 K16384: four-dot step, PRMT upcast, swap-AB 16x64: 78.8 us (_scaled_mm row-wise
#     70.8, per-tensor 37.2): 0.90x of row-wise FP8, far from the 1.6x target. The aligned step
#     (one 128-wide dot) is slower here: 93.2 us not swapped, 99.9 swapped — the dots were not
#     the bottleneck; the decode / layout path per K block is (~750 GB/s either way).
#   M 64: aligned swap-AB 64x64: 128.5 / 22.5 / 38.7 us on N7168 K16384 / N2112 K7168 /
#     N24576 K1536 vs 158.2 / 24.8 / 46.2 for the four-dot step (2026-11-29_tune_fp4_prefetch.log).
#   Loading the next block's scales one iteration ahead (PREFETCH, all bands): M 1 N7168 K16384
#     85.1 -> 77.0 us, M 4096 N4096 K7168 1045 -> 944 us (same run).
#   M 4096: aligned, not swapped, 128x64 4 warps: 966 us (N4096 K7168) / 506 us (N7168 K2048) vs
#     1409 / 740 for the four-dot 128x128 swap-AB (0.12x -> 0.18-0.20x of _scaled_mm; no target).
_CONFIGS = (
    (16, GemmConfig(16, 64, 4, 4, True), False),
    (32, GemmConfig(32, 64, 4, 4, True), False),  # not measured (no benchmark shape)
    (64, GemmConfig(64, 64, 4, 4, True), True),
    (None, GemmConfig(128, 64, 4, 4, False), True),
)


def pick_fp4_config(m: int) -> tuple[GemmConfig, bool]:
    """(launch config, aligned step) of the M band of ``m``."""
    for max_m, cfg, aligned in _CONFIGS:
        if max_m is None or m <= max_m:
            return cfg, aligned
    raise AssertionError("unreachable: the last band has no M bound")


_MAGNITUDES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def shift_tables() -> torch.Tensor:
    """int32 [10, 2] (CPU), the reference of :func:`shift_table_words`: row d < 9 holds the 8 E4M3 bytes of {0, .5, 1, 1.5, 2, 3, 4, 6} * 2^-d
    (bytes 0..3 in column 0, 4..7 in column 1, little-endian); row 9 is all zero (a group too far
    below its row's largest scale, handled apart). Every entry is exact: 0.5 * 2^-8 = 2^-9 is the
    smallest E4M3 subnormal, and the check below would fail otherwise."""
    rows = []
    for d in range(9):
        vals = torch.tensor([m * 2.0**-d for m in _MAGNITUDES], dtype=torch.float32)
        e4 = vals.to(torch.float8_e4m3fn)
        if not torch.equal(e4.float(), vals):
            raise AssertionError(f"E2M1 * 2^-{d} is not exact in E4M3")
        b = e4.view(torch.uint8).to(torch.int64)
        rows.append([int(b[0] | b[1] << 8 | b[2] << 16 | b[3] << 24), int(b[4] | b[5] << 8 | b[6] << 16 | b[7] << 24)])
    rows.append([0, 0])
    return torch.tensor(rows, dtype=torch.int64).to(torch.int32)


#: Decode sizes (M <= MMA_GEMV_MAX_M_FP4) on sm_90 with K % 512 == 0 take the Gluon wgmma GEMV
#: (``gluon_wgmma_gemv.py``: TMA-fed weights, E4M3 wgmma), else the ``mma.sync`` GEMV. Same-run
#: H200 layer-stack timings: 1.05-1.5x faster than ``mma_gemv`` on the benchmark's ten decode cases
#: (docs/gemm.md, "thirteenth session").
WGMMA_GEMV = True
#: fp4_gemm at M = 17..WGMMA_GEMV_CHUNK_MAX_M on sm_90 runs the wgmma GEMV over row chunks (each
#: launch reads the weight again) of 32 rows (``WGMMA_GEMV_WIDE``: the wgmma's N = 32, so M <= 32 is
#: one launch) or, with it off, of 16 rows (N = 16). H200 layer stack (twenty-third session, call b,
#: docs/gemm.md): 32-row chunks take 0.52-0.71x the time of the Triton aligned-step kernel that served
#: M = 17..64 before at M = 17 / 32 (N7168 K16384 M = 32: 53.6 against 90.8 us), 0.72-1.08x at
#: M = 48 and 0.75-1.18x at M = 64 (0.82x / 0.90x summed over the five shapes; slower only on N2112 K7168 and,
#: at M = 64, N24576 K1536); 16-row chunks are slower than 32-row ones on 18 of the 20 cases.
#: 16 turns the chunked path off (M = 17..64 back on the Triton kernel).
WGMMA_GEMV_CHUNK_MAX_M = 64
WGMMA_GEMV_WIDE = True


def _wgmma_gemv_chunks(a: torch.Tensor, a_s: torch.Tensor, b: torch.Tensor, b_s: torch.Tensor,
                       step: int) -> torch.Tensor:
    """The wgmma GEMV over row chunks of ``step`` (16 or 32) rows: each chunk of a / a_s is a
    contiguous row range (16-byte aligned: a row is K % 512 == 0 bytes, 16 scale rows a multiple
    of 16 bytes), written straight into its rows of one [M, N] output."""
    m = a.shape[0]
    c = torch.empty(m, b.shape[0], dtype=torch.bfloat16, device=a.device)
    for r0 in range(0, m, step):
        _wgmma.fp4_wgmma_gemv(a[r0:r0 + step], a_s[r0:r0 + step], b, b_s, out=c[r0:r0 + step])
    return c


#: from this many activation rows on, and where M * N * K reaches :data:`EXPAND_MIN_MNK` (eager) or
#: :data:`EXPAND_MIN_MNK_GRAPH` (inside CUDA-graph capture), fp4_gemm re-encodes the weight as
#: block-scaled FP8 (one launch, ``expand.py``), runs the FP8 GEMM (``fp8_gemm``'s dispatch) and
#: then the fused kernel as a guarded launch that only computes where the re-encoding was not exact
#: (:func:`_fp4_via_fp8`; no host read, so graphs capture it). None: never. Measured on the H200,
#: twenty-fourth session (docs/gemm.md "Twenty-fourth session", docs/measurements/2026-12-03_session24_*):
#:
#: * GPU time, a 4-layer stack in one graph (call f, ``scripts/bench_fp4_expand.py --stack 4``), this
#:   path against the fused kernel on the five benchmark weights: M = 512 1.66-2.00x, M = 1024
#:   1.75-2.53x, M = 4096 3.19-3.87x faster; M = 256 0.86-1.23x.
#: * Host time of one call (call h, ``scripts/probe_fp4_path_host.py``): 250-335 us for the path's
#:   three launches and allocations (fp8_gemm's dispatch alone 83-124 us) against 100-110 us for the
#:   fused kernel. Eager code is bound by the larger of the two, so eagerly the path pays only
#:   where the fused kernel runs for well over 300 us: M N K >= 2^35 (at about 250 TFLOP/s).
#:   Replaying a graph costs no host time, hence the lower bar under capture.
EXPAND_MIN_M: int | None = 512
#: the least M * N * K for the re-encode path in eager calls (with :data:`EXPAND_MIN_M`); see there
EXPAND_MIN_MNK: int = 2**35
#: the same inside CUDA-graph capture (GPU time alone decides)
EXPAND_MIN_MNK_GRAPH: int = 2**33


def _expand_ok(a: torch.Tensor, n: int) -> bool:
    """Whether fp4_gemm takes the re-encode + FP8 GEMM path for these activations and N weight rows."""
    m, k = a.shape
    if EXPAND_MIN_M is None or m < EXPAND_MIN_M:
        return False
    if a.is_cuda:  # FP8 tensor cores from sm_89
        graph = torch.cuda.is_current_stream_capturing()
        least = EXPAND_MIN_MNK_GRAPH if graph else EXPAND_MIN_MNK
        return m * n * k >= least and capability_at_least(a.device, (8, 9))
    return m * n * k >= EXPAND_MIN_MNK  # CPU tensors sent down the Triton path: the interpreter


def _fp4_via_fp8(a: torch.Tensor, a_s: torch.Tensor, b: torch.Tensor, b_s: torch.Tensor) -> torch.Tensor:
    """The re-encode + FP8 GEMM path: C from the FP8 GEMM on the re-encoded weight, then the fused
    kernel as a guarded launch over the same C, whose programs return at once unless the
    re-encoding flagged the weight as not exact (a nonzero group more than 14 binades below its
    block's largest scale, or a NaN scale), in which case it overwrites C with the exact result.
    All on the device: no host synchronization (the twenty-third session's version read the flag on
    the host, so every call paid the host's launch time of its kernels), and capturable in a CUDA
    graph. The guarded launch costs one grid of programs that read one int32 each."""
    q, qs, bad = fp4_weight_to_fp8(b, b_s)
    c = fp8_triton.fp8_gemm(a, a_s, q, qs)
    cfg, aligned = pick_fp4_config(a.shape[0])
    extra = {"ASM": not interpret_mode(), "ALIGNED": aligned, "FAR": True, "GUARD": True, "guard_ptr": bad}
    launch_gemm(_fp4_gemm_kernel, a, a_s, b, b_s, b.shape[0], a.shape[1] // 128, extra, 1, cfg, out=c)
    return c


def fp4_gemm(a: torch.Tensor, a_s: torch.Tensor, b: torch.Tensor, b_s: torch.Tensor, split_k: int | None = None,
             config=None, asm: bool = True, aligned: bool | None = None, far: bool = True) -> torch.Tensor:
    """a e4m3 [M, K], a_s [M, K/128]; b uint8 [N, K/2], b_s uint8 UE8M0 [N, K/32] -> bf16 [M, N].

    ``config`` (:class:`GemmConfig`; ``swap_ab=False`` needs the aligned step) and ``split_k``
    override the tables;
    ``asm=False`` selects the integer-arithmetic upcast (always used by the interpreter);
    ``aligned`` picks the step (None: the band's choice in ``_CONFIGS``; False: four 32-wide dots,
    swap-AB only); ``far=False`` drops the exact handling of groups
    more than 8 binades below their row's largest scale (tuning only: wrong for such weights)."""
    m = a.shape[0]
    # the shipped dispatch by M band; any tuning argument selects the Triton kernel below
    dispatch = config is None and split_k is None and aligned is None and asm and far
    if dispatch and m <= fp8_triton.MMA_GEMV_MAX_M_FP4:
        if WGMMA_GEMV and _wgmma.fp4_wgmma_gemv_ok(a, b, b_s) and _wgmma.counters_ready(a.device):
            return _wgmma.fp4_wgmma_gemv(a, a_s, b, b_s)
        if _mma.mma_gemv_ok(a, b, b_s):
            return _mma.mma_gemv(a, a_s, b, b_s, fp4=True)
    if dispatch and _expand_ok(a, b.shape[0]):
        return _fp4_via_fp8(a, a_s, b, b_s)
    step = 32 if WGMMA_GEMV_WIDE else 16
    if (dispatch and WGMMA_GEMV and fp8_triton.MMA_GEMV_MAX_M_FP4 < m <= WGMMA_GEMV_CHUNK_MAX_M
            and a_s.is_contiguous() and _wgmma.fp4_wgmma_gemv_ok(a[:step], b, b_s)
            and _wgmma.counters_ready(a.device)):
        return _wgmma_gemv_chunks(a, a_s, b, b_s, step)
    band_cfg, band_aligned = pick_fp4_config(a.shape[0])
    cfg = GemmConfig(*config) if config is not None else band_cfg
    if aligned is None:
        aligned = band_aligned if config is None else True
    if not cfg.swap_ab and not aligned:
        raise ValueError(f"the four-dot fp4_gemm step runs swap-AB only, got config {cfg}")
    extra = {"ASM": asm and not interpret_mode(), "ALIGNED": aligned, "FAR": far}
    return launch_gemm(_fp4_gemm_kernel, a, a_s, b, b_s, b.shape[0], a.shape[1] // 128, extra, split_k, cfg)
