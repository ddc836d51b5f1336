"""The tiled ``tl.dot`` GEMM of ``fp4_gemm``: FP8 activations x packed E2M1 weights (UE8M0 per 32),
every M, every GPU with FP8 tensor cores, and the Triton interpreter.

Hopper has no FP4 MMA, but every E2M1 value is exactly an E4M3 value, so the packed weight tile is
upcast in registers (a byte-permute table lookup, ``PRMT``; integer arithmetic under the
interpreter) and fed to the FP8 tensor cores. The weight scale changes every 32 along K per row,
so it cannot simply be applied after a 128-wide dot. Two steps per 128-wide K block, chosen per M
band (:data:`CONFIGS`):

* **four dots** (small M, swap-AB): four dependent 32-wide dots (32 is the wgmma K of FP8), each
  scaled by its own power of two, then by the activation scale.
* **aligned**: each row's four groups are shifted to the row's largest exponent of the block --
  group g is upcast to ``e2m1 * 2^-(e_max - e_g)``, exact in E4M3 while the shift is at most 8 --
  so the block is ONE 128-wide dot scaled by ``2^(e_max - 127) * a_s``, as in ``fp8_gemm``. A
  group more than 8 binades below its block's largest is left out of that dot and added exactly
  by a second pass over the tile, which runs only when the tile has such a group. Works in both
  orientations (swap-AB: the weight is the register A operand; not swapped: the shared-memory B
  operand).

Both are exact reorderings of the spec's ``acc += dot32 * a_s * b_s`` up to fp32 summation order.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from lowbit._backend import interpret_mode
from lowbit.ops._scales import e8m0_decode, load_scale
from lowbit.ops.fp8_gemm.tiled import GemmConfig, launch_gemm, split_range, store_tile, tile_coords

__all__ = ["CONFIGS", "fp4_gemm_tiled", "pick_config", "shift_table_words", "shift_tables"]


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
    block kb, clamped to the last block. Called one iteration ahead: plain loads are not
    software-pipelined by Triton, and loaded where they are used they stall every step."""
    kbc = tl.minimum(kb, n_kb - 1)
    s_a = load_scale(as_ptr + o_m * n_kb + kbc, m_m, AS_E8M0)
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
    acc = acc + _scaled_wdot(b_w, b_a, e8m0_decode(e_max), s_a, SWAP_AB)
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
        s_a = load_scale(as_ptr + o_m * n_kb + kb, m_m, AS_E8M0)
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
            acc = acc + _scaled_wdot(b_w, b_a, tl.where(far_j, e8m0_decode(e_j), 0.0), s_a, SWAP_AB)
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
        s_b = e8m0_decode(tl.sum(tl.where(o_g[None, :] == j, e, 0), 1))
        acc = acc + (tl.dot(b_w, tl.trans(b_a)) * s_b[:, None]) * s_a[None, :]
    return acc


@triton.jit
def _fp4_iteration(acc, far, kb, s_a, e, a_ptr, as_ptr, b_ptr, bs_ptr, o_m, o_n, m_m, m_n, K, n_kb,
                   AS_E8M0: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ASM: tl.constexpr,
                   SWAP_AB: tl.constexpr, ALIGNED: tl.constexpr):
    """One K block of the main loop with (s_a, e) loaded one iteration ago: loads block kb + 1's
    scales, returns (acc, far, those scales)."""
    s_a_n, e_n = _fp4_scales(kb + 1, as_ptr, bs_ptr, o_m, o_n, m_m, m_n, K, n_kb, AS_E8M0)
    if ALIGNED:
        acc, far = _fp4_step_aligned(acc, far, kb, s_a, e, a_ptr, b_ptr, o_m, o_n, m_m, m_n, K, BLOCK_M, BLOCK_N, ASM,
                                     SWAP_AB)
    else:
        acc = _fp4_step(acc, kb, s_a, e, a_ptr, b_ptr, o_m, o_n, m_m, m_n, K, BLOCK_M, BLOCK_N, ASM)
    return acc, far, s_a_n, e_n


@triton.jit(do_not_specialize=["M", "n_kb", "kb_per_split"])  # see fp8_gemm/tiled.py
def _fp4_gemm_kernel(
    a_ptr, as_ptr, b_ptr, bs_ptr, out_ptr, M, N, K, n_kb, kb_per_split,
    AS_E8M0: tl.constexpr, SWAP_AB: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr, INTERPRET: tl.constexpr,
    ASM: tl.constexpr, ALIGNED: tl.constexpr, guard_ptr=None, GUARD: tl.constexpr = False,
):
    """ASM: the PRMT upcast (GPU), else integer arithmetic (the interpreter). GUARD: every program
    first reads the int32 ``guard_ptr[0]`` and returns at once when it is 0 (the re-encode path's
    exactness flag, ``dispatch.fp4_via_fp8``: the kernel then only fills in a result the FP8 GEMM
    could not give exactly, decided on the device)."""
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
        # see fp8_gemm/tiled.py: range() over a runtime bound fails in the 3.6 interpreter
        kb = kb0
        while kb < kb1:
            acc, far, s_a, e = _fp4_iteration(acc, far, kb, s_a, e, a_ptr, as_ptr, b_ptr, bs_ptr, o_m, o_n, m_m, m_n, K,
                                              n_kb, AS_E8M0, BLOCK_M, BLOCK_N, ASM, SWAP_AB, ALIGNED)
            kb += 1
        if far > 8:
            kb = kb0
            while kb < kb1:
                acc = _fp4_step_far(acc, kb, a_ptr, as_ptr, b_ptr, bs_ptr, o_m, o_n, m_m, m_n, K, n_kb,
                                    AS_E8M0, BLOCK_M, BLOCK_N, ASM, SWAP_AB)
                kb += 1
    else:
        for kb in range(kb0, kb1):
            acc, far, s_a, e = _fp4_iteration(acc, far, kb, s_a, e, a_ptr, as_ptr, b_ptr, bs_ptr, o_m, o_n, m_m, m_n, K,
                                              n_kb, AS_E8M0, BLOCK_M, BLOCK_N, ASM, SWAP_AB, ALIGNED)
        # a second pass over the tile's K range, after the main loop so its registers are not
        # live during it; taken only when some group was more than 8 binades down
        if far > 8:
            for kb in range(kb0, kb1):
                acc = _fp4_step_far(acc, kb, a_ptr, as_ptr, b_ptr, bs_ptr, o_m, o_n, m_m, m_n, K, n_kb,
                                    AS_E8M0, BLOCK_M, BLOCK_N, ASM, SWAP_AB)
    store_tile(out_ptr, acc, o_m, o_n, m_m, m_n, M, N, i_split, SWAP_AB)


# Launch configs by M band (first band with m <= max M wins): (max M, config, aligned step). The
# packed weight tile is [block_n, 64] bytes per 128-wide K block. Chosen by ``lowbit tune
# fp4_gemm`` on the H200, cold L2 (docs/gemm.md): at M = 1 the four-dot step beat the aligned one
# (the decode / layout path per K block is the bound, not the dots), from M = 64 on the aligned step
# wins; M = 4096 runs not swapped, 128x64 on 4 warps. The M <= 32 row has no benchmark shape.
CONFIGS = (
    (16, GemmConfig(16, 64, 4, 4, True), False),
    (32, GemmConfig(32, 64, 4, 4, True), False),
    (64, GemmConfig(64, 64, 4, 4, True), True),
    (None, GemmConfig(128, 64, 4, 4, False), True),
)


def pick_config(m: int) -> tuple[GemmConfig, bool]:
    """(launch config, aligned step) of the M band of ``m``."""
    for max_m, cfg, aligned in CONFIGS:
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


def fp4_gemm_tiled(a: torch.Tensor, a_s: torch.Tensor, b: torch.Tensor, b_s: torch.Tensor,
                   config: GemmConfig | None = None, aligned: bool | None = None, split_k: int | None = None,
                   out: torch.Tensor | None = None, guard: torch.Tensor | None = None) -> torch.Tensor:
    """a e4m3 [M, K], a_s [M, K/128]; b uint8 [N, K/2], b_s uint8 UE8M0 [N, K/32] -> bf16 [M, N].

    ``config`` (:class:`GemmConfig`; ``swap_ab=False`` needs the aligned step) and ``aligned``
    (None: the band's step in :data:`CONFIGS`, or the aligned one with an explicit config; False:
    four 32-wide dots, swap-AB only) and ``split_k`` are the launch parameters. ``out``: write
    there (needs no split). ``guard``: an int32 [1] device flag; the launch computes only where it
    is nonzero (``dispatch.fp4_via_fp8``)."""
    band_cfg, band_aligned = pick_config(a.shape[0])
    cfg = GemmConfig(*config) if config is not None else band_cfg
    if aligned is None:
        aligned = band_aligned if config is None else True
    if not cfg.swap_ab and not aligned:
        raise ValueError(f"the four-dot fp4_gemm step runs swap-AB only, got config {cfg}")
    extra = {"ASM": not interpret_mode(), "ALIGNED": aligned}
    if guard is not None:
        extra.update(GUARD=True, guard_ptr=guard)
    return launch_gemm(_fp4_gemm_kernel, a, a_s, b, b_s, b.shape[0], a.shape[1] // 128, extra, cfg, split_k, out=out)
