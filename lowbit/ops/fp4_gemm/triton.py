"""Triton kernel for ``fp4_gemm``: FP8 activations x packed E2M1 weights (UE8M0 per 32), Hopper.

Hopper has no FP4 MMA, but every E2M1 value is exactly an E4M3 value, so the packed weight tile is
upcast in registers by bit arithmetic — magnitude code ``c`` (0..7) maps to the E4M3 byte
``0`` / ``0x30`` (0.5) for ``c < 2`` and ``(c << 2) + 0x30`` otherwise, the sign moves from bit 3
to bit 7 — and fed to the FP8 tensor cores. The weight scale changes every 32 along K per row, so
it cannot be applied after a 128-wide dot; each 128-wide K block runs four 32-wide FP8 dots
(32 is the wgmma K of FP8), scales each by its power of two, then applies the activation scale
(exact reordering of the spec's ``acc += dot32 * a_s * b_s``). Pre-scaling the upcast weights by
the power of two instead would lose exactness (E4M3 has a narrower exponent range).

The kernel always runs swap-AB (tile of ``C^T = B @ A^T``): the decoded weight is the register
operand and fills the MMA's M (64+ rows), the activation rows the narrow N — the right shape for
decode, where the op is bandwidth-bound on half the bytes of FP8.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from lowbit._backend import interpret_mode
from lowbit.ops.fp8_gemm.triton import GemmConfig, _load_scale, launch_gemm, pick_config, split_range, store_tile, tile_coords


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
def _fp4_step(acc, kb, a_ptr, as_ptr, b_ptr, bs_ptr, o_m, o_n, m_m, m_n, K, n_kb,
              AS_E8M0: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ASM: tl.constexpr):
    """acc[BLOCK_N, BLOCK_M] += sum_j (dot(W_j, A_j^T) * 2^(b_s_j - 127)) * a_s over one 128 K block.

    The power-of-two weight scale is applied first (exact), then the activation scale in the same
    FMA, so no second accumulator tile is kept (register pressure)."""
    s_a = _load_scale(as_ptr + o_m * n_kb + kb, m_m, AS_E8M0)
    for j in tl.static_range(4):
        o_k = kb * 128 + j * 32 + tl.arange(0, 32)
        # [BLOCK_M, 32] e4m3
        b_a = tl.load(a_ptr + o_m[:, None] * K + o_k[None, :], mask=m_m[:, None], other=0.0)
        o_p = kb * 64 + j * 16 + tl.arange(0, 16)
        # [BLOCK_N, 16] packed E2M1 -> [BLOCK_N, 32] e4m3
        b_p = tl.load(b_ptr + o_n[:, None] * (K // 2) + o_p[None, :], mask=m_n[:, None], other=0)
        b_w = _upcast_e2m1x2(b_p, BLOCK_N, 16, ASM)
        # [BLOCK_N] UE8M0 scale of this 32-wide block
        s_b = _load_scale(bs_ptr + o_n * (K // 32) + kb * 4 + j, m_n, True)
        acc = acc + (tl.dot(b_w, tl.trans(b_a)) * s_b[:, None]) * s_a[None, :]
    return acc


@triton.jit(do_not_specialize=["M", "n_kb", "kb_per_split"])  # see _fp8_gemm_kernel
def _fp4_gemm_kernel(
    a_ptr, as_ptr, b_ptr, bs_ptr, out_ptr, M, N, K, n_kb, kb_per_split,
    AS_E8M0: tl.constexpr, SWAP_AB: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr, INTERPRET: tl.constexpr,
    ASM: tl.constexpr,
):
    i_m, i_n = tile_coords(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    i_split, kb0, kb1 = split_range(n_kb, kb_per_split)
    o_m = i_m * BLOCK_M + tl.arange(0, BLOCK_M)
    o_n = i_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_m = o_m < M
    m_n = o_n < N
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    if INTERPRET:
        # see _fp8_gemm_kernel: range() over a runtime bound fails in the 3.6 interpreter
        kb = kb0
        while kb < kb1:
            acc = _fp4_step(acc, kb, a_ptr, as_ptr, b_ptr, bs_ptr, o_m, o_n, m_m, m_n, K, n_kb, AS_E8M0, BLOCK_M, BLOCK_N, ASM)
            kb += 1
    else:
        for kb in range(kb0, kb1):
            acc = _fp4_step(acc, kb, a_ptr, as_ptr, b_ptr, bs_ptr, o_m, o_n, m_m, m_n, K, n_kb, AS_E8M0, BLOCK_M, BLOCK_N, ASM)
    store_tile(out_ptr, acc, o_m, o_n, m_m, m_n, M, N, i_split, True)


# Launch configs by M band (first band with m <= max M wins). Always swap-AB (see the module
# docstring); the packed weight tile is [block_n, 64] bytes per 128-wide K block. Chosen by
# scripts/tune_gemm.py on the H200, cold L2 (docs/gemm.md):
#   M 1, N7168 K16384: 79.8 us with the PRMT upcast (integer upcast 107.0; _scaled_mm row-wise
#     72.7, per-tensor 44.1): 0.91x of row-wise FP8, far from the 1.6x target — the kernel is bound
#     by its four dependent K=32 wgmma + scale steps per 128 block and the register upcast, not by
#     bytes. BLOCK_N 128 / 256, 8 warps, 6 stages were all slower.
#   M 64, N7168 K16384: 148.7 us (integer upcast 216.5; _scaled_mm row-wise 56.6).
#   M 4096, N4096 K7168: 1411 us = 0.12x _scaled_mm (128x128 spills 18 regs; no target there).
_CONFIGS = (
    (16, GemmConfig(16, 64, 4, 4, True)),
    (32, GemmConfig(32, 64, 4, 4, True)),  # not measured (no benchmark shape)
    (64, GemmConfig(64, 64, 4, 4, True)),
    (None, GemmConfig(128, 128, 8, 3, True)),
)


def fp4_gemm(a: torch.Tensor, a_s: torch.Tensor, b: torch.Tensor, b_s: torch.Tensor, split_k: int | None = None,
             config=None, asm: bool = True) -> torch.Tensor:
    """a e4m3 [M, K], a_s [M, K/128]; b uint8 [N, K/2], b_s uint8 UE8M0 [N, K/32] -> bf16 [M, N].

    ``config`` (:class:`GemmConfig`, ``swap_ab`` must be True) and ``split_k`` override the tables;
    ``asm=False`` selects the integer-arithmetic upcast (always used by the interpreter)."""
    cfg = GemmConfig(*config) if config is not None else pick_config(a.shape[0], _CONFIGS)
    if not cfg.swap_ab:
        raise ValueError(f"fp4_gemm runs swap-AB only, got config {cfg}")
    return launch_gemm(_fp4_gemm_kernel, a, a_s, b, b_s, b.shape[0], a.shape[1] // 128,
                       {"ASM": asm and not interpret_mode()}, split_k, cfg)
