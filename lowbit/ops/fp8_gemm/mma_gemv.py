"""Decode-size GEMV on the tensor cores for ``fp8_gemm`` (M <= 8) and ``fp4_gemm`` (M <= 16):
``mma.sync`` by inline PTX on E4M3 operands, the weight rows as the MMA's A (16 rows a tile, RT
tiles a program) and the activation rows as its B columns (8 a tile, NCT = ceil(M / 8) tiles,
up to 8: any M <= 64 works, the dispatch bounds are where it measured faster).

The MMA is m16n8k32 with E4M3 inputs, written as what sm_90 executes for it: Hopper has no E4M3
``mma.sync`` unit (its FP8 tensor cores are reached by wgmma only), and ptxas lowers the E4M3
form to ``F2FP.F16.E4M3`` unpacks plus two fp16 ``HMMA.16816`` and an FADD per output. Here the
conversion (``cvt.rn.f16x2.e4m3x2``, exact: every E4M3 value is an fp16 value) and the two
chained fp16 MMAs are spelled out, which saves the FADDs (``_MMA_E4M3_PTX``).

Why: at decode sizes the GEMM is a stream over the weight, and the work per byte decides the
speed. The tiled kernels (``tiled.py``, ``fp4_gemm/tiled.py``) stage every tile through shared memory and, for FP4,
re-lay the upcast tile there; here each lane loads exactly the bytes of its own A fragments from
global memory, decodes them in registers (FP4: about seven integer ops per eight codes) and issues the
MMA — no shared memory, no layout conversion, and the grid splits K over the warps of a program
so that even N = 2112 fills the GPU.

Fragments (PTX ``mma.m16n8k32.row.col.f32.e4m3.e4m3.f32``; lane ``L = 4 g + t``): A (16 rows x
32 k) ``a0 = (row g, k 4t..4t+3)``, ``a1 = (row g + 8, ..)``, ``a2 = (row g, k 16+4t..16+4t+3)``,
``a3 = (row g + 8, ..)``; B (32 k x 8 columns) ``b0 = (k 4t..4t+3, column g)``, ``b1 = (k
16+4t.., column g)``; C / D ``c0, c1 = (row g, columns 2t, 2t+1)``, ``c2, c3 = (row g + 8, ..)``.
The order of k inside an MMA is free (A and B only have to agree), and so is the split of a
128-wide K block over the four MMAs of the block when one scale covers it:

* **FP8 weight** (one scale per 128 x 128 block): lane t takes bytes ``32 t .. 32 t + 31`` of the
  block for each of its rows (two 16-byte loads); MMA s of the block uses bytes ``32 t + 8 s ..
  + 7`` (a0 = the first word, a2 = the second), and the activation row is read the same way, so
  the four MMAs chain their sums in the accumulator and the block's scale is applied once.
* **FP4 weight** (UE8M0 per 32 along K): MMA s must cover exactly group s of the block, so lane t
  takes the 4 bytes ``16 s + 4 t`` (8 codes: k ``32 s + 8 t .. + 7``, code 2i in the low nibble
  of byte i) of each row. The low nibbles (k even) become a0 / a1 and the high nibbles (k odd)
  a2 / a3; the activation's 8 bytes are split into even and odd bytes by two ``prmt``. Two
  bit-identical decodes (``MmaGemvConfig.decode``): an E2M1 code ``s e1 e0 m`` re-encoded as the E4M3 byte
  ``s 0 0 e1 e0 m 0 0`` is exactly its value times 2^-6 (normals and the subnormal 0.5 alike),
  two shifts and masks per word, then the MMA's E4M3 -> fp16 conversion; or the code written
  straight as the high byte of the fp16 ``s 000 e1e0 m 0...`` (its value times 2^-14) and
  spread over zero low bytes by ``prmt``, no conversion instruction. The 2^6 / 2^14 is put back
  on the result. Each MMA's sum is scaled by its row's group scale (fp32 FFMA), each block's by
  the activation scale.

The data of lane L of warp w sit in element ``32 w + L`` of ``[32 * warps]`` tensors (one element
per thread, every address computed from the element index, so no layout conversion can move data
between lanes); the MMA is inline PTX, emulated with tensor arithmetic under the interpreter.
Warp w of a program takes the K blocks w, w + W, w + 2 W, ... of the program's 16 RT rows,
loading block i + W before it runs block i's MMAs (a register double buffer; deeper or
shared-memory staged schedules all measured slower, docs/gemm.md); the warps' sums
are added at the end (``tl.sum`` over the warp axis) and written as bf16. Accumulator tiles are
Triton tuples (``_lanes.tuple_replace`` rebuilds one with an element changed), so RT and NCT are plain
compile-time loops. Measured numbers: docs/gemm.md.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from lowbit._backend import interpret_mode
from lowbit.ops._lanes import i32, mma16816_f16x2, pack_halves, split2, split4, tuple_replace, zeros_tuple
from lowbit.ops._scales import load_scale
from lowbit.ops._triton_pdl import launch_options

__all__ = ["MAX_M", "SHORT_LAUNCH_BYTES", "MmaGemvConfig", "mma_gemv", "pick_config", "weight_bytes"]

#: rows of x one launch serves (NCT = ceil(M / 8) <= 8 column tiles of 8)
MAX_M = 64
#: what the FP4 kernel multiplies its sums by, per decode: the decoded weights are E2M1 x 2^-14 / 2^-6
FP4_RESULT_SCALE = {"f16": 16384.0, "e4m3": 64.0}


_MAG_LO = tl.constexpr(0x1C1C1C1C)  # E4M3 bits 2..4 of every byte: the E2M1 magnitude, placed
_MAG_F16 = tl.constexpr(0x0E0E0E0E)  # bits 1..3 of every byte: an fp16 high byte's exponent low bits + top mantissa bit
_SIGN = tl.constexpr(i32(0x80808080))
_BYTE3 = tl.constexpr(i32(0xFF000000))
_EXP_BITS = tl.constexpr(0x7F800000)  # the fp32 exponent field
_F32_2M127 = tl.constexpr(0x00400000)  # 2^-127, the subnormal UE8M0 byte 0 stands for


@triton.jit
def _e4m3_byte_values(r):
    """int32 holding 4 E4M3 bytes -> their 4 fp32 values (the interpreter's MMA emulation; no
    NaN handling: inputs here are finite)."""
    v0 = _e4m3_value(r & 0xFF)
    v1 = _e4m3_value((r >> 8) & 0xFF)
    v2 = _e4m3_value((r >> 16) & 0xFF)
    v3 = _e4m3_value((r >> 24) & 0xFF)
    return v0, v1, v2, v3


@triton.jit
def _e4m3_value(b):
    e = (b >> 3) & 15
    m = (b & 7).to(tl.float32)
    mag = tl.where(e == 0, m * 0.001953125, (8.0 + m) * tl.exp2(e.to(tl.float32) - 10.0))
    return tl.where((b & 0x80) != 0, -mag, mag)


# One m16n8k32 E4M3 MMA as two m16n8k16 fp16 MMAs on exactly converted operands (every E4M3
# value is an fp16 value). sm_90 has no E4M3 ``mma.sync`` unit: ptxas lowers the E4M3 form to
# the same F2FP unpacks and two HMMA.16816, plus an FADD per output to join them; chaining the
# two MMAs through the accumulator here saves those (sm_90 offline SASS: 16 FADD per 128-wide
# block). The two bytes of each 16-bit half pair with the same two bytes of B, so the k order
# is the E4M3 form's, up to a permutation A and B share.
_MMA_E4M3_PTX = tl.constexpr("""
{
.reg .b16 l0, l1, l2, l3, l4, l5, h0, h1, h2, h3, h4, h5;
.reg .b32 p0, p1, p2, p3, p4, p5;
mov.b32 {l0, h0}, $4;
mov.b32 {l1, h1}, $5;
mov.b32 {l2, h2}, $6;
mov.b32 {l3, h3}, $7;
mov.b32 {l4, h4}, $8;
mov.b32 {l5, h5}, $9;
cvt.rn.f16x2.e4m3x2 p0, l0;
cvt.rn.f16x2.e4m3x2 p1, l1;
cvt.rn.f16x2.e4m3x2 p2, h0;
cvt.rn.f16x2.e4m3x2 p3, h1;
cvt.rn.f16x2.e4m3x2 p4, l4;
cvt.rn.f16x2.e4m3x2 p5, h4;
mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {$0, $1, $2, $3}, {p0, p1, p2, p3}, {p4, p5}, {$10, $11, $12, $13};
cvt.rn.f16x2.e4m3x2 p0, l2;
cvt.rn.f16x2.e4m3x2 p1, l3;
cvt.rn.f16x2.e4m3x2 p2, h2;
cvt.rn.f16x2.e4m3x2 p3, h3;
cvt.rn.f16x2.e4m3x2 p4, l5;
cvt.rn.f16x2.e4m3x2 p5, h5;
mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {$0, $1, $2, $3}, {p0, p1, p2, p3}, {p4, p5}, {$0, $1, $2, $3};
}
""")


@triton.jit
def _mma16832(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3, NT: tl.constexpr, INTERPRET: tl.constexpr):
    """D = A B + C of one ``mma.sync.m16n8k32`` (E4M3 in, fp32 accumulate) per warp, operands as
    per-lane [NT] tensors (lane = element % 32; layouts in the module docstring)."""
    if INTERPRET:
        W: tl.constexpr = NT // 32
        R: tl.constexpr = [NT // 32, 8, 1, 4]  # A taps [W, 8 (g), 1, 4 (t)]
        Q: tl.constexpr = [NT // 32, 1, 8, 4]  # B taps [W, 1, 8 (n), 4 (t)]
        x00, x01, x02, x03 = _e4m3_byte_values(b0)
        x10, x11, x12, x13 = _e4m3_byte_values(b1)
        y00, y01, y02, y03 = _e4m3_byte_values(a0)
        y20, y21, y22, y23 = _e4m3_byte_values(a2)
        top = tl.sum(tl.reshape(y00, R) * tl.reshape(x00, Q) + tl.reshape(y01, R) * tl.reshape(x01, Q)
                     + tl.reshape(y02, R) * tl.reshape(x02, Q) + tl.reshape(y03, R) * tl.reshape(x03, Q)
                     + tl.reshape(y20, R) * tl.reshape(x10, Q) + tl.reshape(y21, R) * tl.reshape(x11, Q)
                     + tl.reshape(y22, R) * tl.reshape(x12, Q) + tl.reshape(y23, R) * tl.reshape(x13, Q), 3)
        y10, y11, y12, y13 = _e4m3_byte_values(a1)
        y30, y31, y32, y33 = _e4m3_byte_values(a3)
        bot = tl.sum(tl.reshape(y10, R) * tl.reshape(x00, Q) + tl.reshape(y11, R) * tl.reshape(x01, Q)
                     + tl.reshape(y12, R) * tl.reshape(x02, Q) + tl.reshape(y13, R) * tl.reshape(x03, Q)
                     + tl.reshape(y30, R) * tl.reshape(x10, Q) + tl.reshape(y31, R) * tl.reshape(x11, Q)
                     + tl.reshape(y32, R) * tl.reshape(x12, Q) + tl.reshape(y33, R) * tl.reshape(x13, Q), 3)
        t0, t1 = tl.split(tl.reshape(top, [W, 8, 4, 2]))  # columns 2t, 2t + 1 of row g
        u0, u1 = tl.split(tl.reshape(bot, [W, 8, 4, 2]))
        return (c0 + tl.reshape(t0, [NT]), c1 + tl.reshape(t1, [NT]), c2 + tl.reshape(u0, [NT]),
                c3 + tl.reshape(u1, [NT]))
    else:
        return tl.inline_asm_elementwise(_MMA_E4M3_PTX, "=f,=f,=f,=f,r,r,r,r,r,r,0,1,2,3",
                                         [a0, a1, a2, a3, b0, b1, c0, c1, c2, c3],
                                         dtype=(tl.float32, tl.float32, tl.float32, tl.float32), is_pure=True, pack=1)


@triton.jit
def _e2m1_lo(w):
    """E4M3 bytes (x 2^-6) of the low nibbles of the 4 bytes of ``w`` (codes 0, 2, 4, 6)."""
    return ((w << 2) & _MAG_LO) | ((w << 4) & _SIGN)


@triton.jit
def _e2m1_hi(w):
    """E4M3 bytes (x 2^-6) of the high nibbles (codes 1, 3, 5, 7)."""
    return ((w >> 2) & _MAG_LO) | (w & _SIGN)


@triton.jit
def _e2m1_f16_high_bytes(w):
    """The 8 codes of ``w`` (code 2i in the low nibble of byte i) -> the fp16 high bytes of their
    values x 2^-14: (codes 0, 2, 4, 6), (codes 1, 3, 5, 7). An E2M1 code ``s e1 e0 m`` is the fp16
    ``s 0 0 0 e1 e0 m 0000000 00`` (exponent field e1 e0: 2^(e - 15) (1 + m / 2) for e >= 1, and for
    e = 0 the subnormal m 2^-15, i.e. 0.5 x 2^-14), so the low byte is zero and the high byte is
    the sign at bit 7 and the magnitude at bits 1..3."""
    ev = ((w << 4) & _SIGN) | ((w << 1) & _MAG_F16)
    od = (w & _SIGN) | ((w >> 3) & _MAG_F16)  # (arithmetic shift: the bits it fills are masked off)
    return ev, od


@triton.jit
def _f16_pairs(hb, INTERPRET: tl.constexpr):
    """4 fp16 high bytes -> the f16x2 words (bytes 0, 1) and (bytes 2, 3), low bytes zero: a ``prmt``
    each (byte selectors 4 = the zero operand)."""
    if INTERPRET:
        return ((hb & 0xFF) << 8) | ((hb & 0xFF00) << 16), ((hb >> 8) & 0xFF00) | (hb & _BYTE3)
    return tl.inline_asm_elementwise("{prmt.b32 $0, $2, 0, 0x1404; prmt.b32 $1, $2, 0, 0x3424;}", "=r,=r,r", [hb],
                                     dtype=(tl.int32, tl.int32), is_pure=True, pack=1)


@triton.jit
def _e4m3_f16_pairs(w, INTERPRET: tl.constexpr):
    """int32 of 4 E4M3 bytes -> f16x2 of (bytes 0, 1) and (bytes 2, 3), exact (``cvt.rn.f16x2.e4m3x2``)."""
    if INTERPRET:
        v0, v1, v2, v3 = _e4m3_byte_values(w)
        return pack_halves(v0, v1), pack_halves(v2, v3)
    return tl.inline_asm_elementwise(
        "{.reg .b16 l, h; mov.b32 {l, h}, $2; cvt.rn.f16x2.e4m3x2 $0, l; cvt.rn.f16x2.e4m3x2 $1, h;}", "=r,=r,r",
        [w], dtype=(tl.int32, tl.int32), is_pure=True, pack=1)


# One FP4 group (32 k) of one 16-row tile and one column tile: two chained fp16 m16n8k16 MMAs from
# a zero accumulator ($4..$11 the A words of the two, $12..$15 their B words). The first writes
# local registers, so no output can clobber an input the second still reads.
_MMA_F16_GROUP_PTX = tl.constexpr("""
{
.reg .f32 z, d0, d1, d2, d3;
mov.f32 z, 0f00000000;
mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {d0, d1, d2, d3}, {$4, $5, $6, $7}, {$12, $13}, {z, z, z, z};
mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {$0, $1, $2, $3}, {$8, $9, $10, $11}, {$14, $15}, {d0, d1, d2, d3};
}
""")


@triton.jit
def _mma_group_f16(a0, a1, a2, a3, a4, a5, a6, a7, b0, b1, b2, b3, NT: tl.constexpr, INTERPRET: tl.constexpr):
    """(A1 B1 + A2 B2) of two warp-wide fp16 ``mma.sync.m16n8k16`` (A1 = a0..a3, B1 = b0, b1; A2 =
    a4..a7, B2 = b2, b3), per-lane [NT] int32 operands holding f16x2; fp32 [NT] x 4 results."""
    if INTERPRET:
        d0, d1, d2, d3 = mma16816_f16x2(a0, a1, a2, a3, b0, b1, NT)
        e0, e1, e2, e3 = mma16816_f16x2(a4, a5, a6, a7, b2, b3, NT)
        return d0 + e0, d1 + e1, d2 + e2, d3 + e3
    return tl.inline_asm_elementwise(_MMA_F16_GROUP_PTX, "=f,=f,=f,=f,r,r,r,r,r,r,r,r,r,r,r,r",
                                     [a0, a1, a2, a3, a4, a5, a6, a7, b0, b1, b2, b3],
                                     dtype=(tl.float32, tl.float32, tl.float32, tl.float32), is_pure=True, pack=1)


@triton.jit
def _even_odd_bytes(lo, hi, INTERPRET: tl.constexpr):
    """The 8 bytes ``lo | hi << 32`` -> (bytes 0, 2, 4, 6), (bytes 1, 3, 5, 7): one ``prmt`` each."""
    if INTERPRET:
        ev = (lo & 0xFF) | ((lo >> 8) & 0xFF00) | ((hi << 16) & 0xFF0000) | ((hi << 8) & _BYTE3)
        od = ((lo >> 8) & 0xFF) | ((lo >> 16) & 0xFF00) | ((hi << 8) & 0xFF0000) | (hi & _BYTE3)
        return ev, od
    ev = tl.inline_asm_elementwise("prmt.b32 $0, $1, $2, 0x6420;", "=r,r,r", [lo, hi], dtype=tl.int32,
                                   is_pure=True, pack=1)
    od = tl.inline_asm_elementwise("prmt.b32 $0, $1, $2, 0x7531;", "=r,r,r", [lo, hi], dtype=tl.int32,
                                   is_pure=True, pack=1)
    return ev, od


@triton.jit
def _fp4_words(b_ptr, row, kb, t, m, KW, NT: tl.constexpr):
    """Words ``16 s + 4 t`` bytes into block kb of row ``row`` for s = 0..3 (the codes of MMA s)."""
    o_4 = tl.arange(0, 4)[None, :]
    return split4(tl.load(b_ptr + (row * KW + kb * 16 + t)[:, None] + 4 * o_4, mask=m[:, None], other=0), NT)


@triton.jit
def _fp8_words(b_ptr, row, kb, t, m, KW, NT: tl.constexpr):
    """Words ``8 t .. 8 t + 7`` of block kb of row ``row`` (bytes 32 t .. 32 t + 31), as two
    16-byte loads (an [NT, 8] load would be split over two threads and re-laid out)."""
    o_4 = tl.arange(0, 4)[None, :]
    base = (row * KW + kb * 32 + 8 * t)[:, None] + o_4
    w0, w1, w2, w3 = split4(tl.load(b_ptr + base, mask=m[:, None], other=0), NT)
    w4, w5, w6, w7 = split4(tl.load(b_ptr + base + 4, mask=m[:, None], other=0), NT)
    return w0, w1, w2, w3, w4, w5, w6, w7


@triton.jit
def _x_words_fp4(a_ptr, col, kb, t, m, AW, NT: tl.constexpr):
    """Raw activation words of the 4 MMAs of block kb for activation row ``col``, FP4 ordering:
    MMA s reads bytes ``32 s + 8 t .. + 7`` (words 2 s, 2 s + 1 of the result)."""
    o_2 = tl.arange(0, 2)[None, :]
    base = (col * AW + kb * 32 + 2 * t)[:, None] + o_2
    l0, h0 = split2(tl.load(a_ptr + base, mask=m[:, None], other=0), NT)
    l1, h1 = split2(tl.load(a_ptr + base + 8, mask=m[:, None], other=0), NT)
    l2, h2 = split2(tl.load(a_ptr + base + 16, mask=m[:, None], other=0), NT)
    l3, h3 = split2(tl.load(a_ptr + base + 24, mask=m[:, None], other=0), NT)
    return l0, h0, l1, h1, l2, h2, l3, h3


@triton.jit
def _x_frags_fp4(x, INTERPRET: tl.constexpr):
    """Raw FP4-ordered activation words -> the B fragments (even bytes, odd bytes) of the 4 MMAs."""
    e0, o0 = _even_odd_bytes(x[0], x[1], INTERPRET)
    e1, o1 = _even_odd_bytes(x[2], x[3], INTERPRET)
    e2, o2 = _even_odd_bytes(x[4], x[5], INTERPRET)
    e3, o3 = _even_odd_bytes(x[6], x[7], INTERPRET)
    return e0, o0, e1, o1, e2, o2, e3, o3


@triton.jit
def _x_f16_fp4(x, INTERPRET: tl.constexpr):
    """Raw FP4-ordered activation words -> per MMA s the four f16x2 B words (k 0, 2), (4, 6),
    (1, 3), (5, 7) of the lane's 8 k, matching :func:`_e2m1_f16_high_bytes` + :func:`_f16_pairs`.
    Done once per column tile and block, shared by the program's row tiles."""
    res = ()
    for s in tl.static_range(4):
        ev, od = _even_odd_bytes(x[2 * s], x[2 * s + 1], INTERPRET)
        e02, e46 = _e4m3_f16_pairs(ev, INTERPRET)
        o13, o57 = _e4m3_f16_pairs(od, INTERPRET)
        res = res + (e02, e46, o13, o57)
    return res


@triton.jit
def _group_fp4_f16(q0, q1, xb, s: tl.constexpr, s0, s1, c0, c1, c2, c3, NT: tl.constexpr, INTERPRET: tl.constexpr):
    """:func:`_group_fp4` with the codes decoded straight to fp16 (``xb``: :func:`_x_f16_fp4`)."""
    e0, o0 = _e2m1_f16_high_bytes(q0)
    e1, o1 = _e2m1_f16_high_bytes(q1)
    e0a, e0b = _f16_pairs(e0, INTERPRET)  # row g: k (0, 2), (4, 6)
    e1a, e1b = _f16_pairs(e1, INTERPRET)  # row g + 8
    o0a, o0b = _f16_pairs(o0, INTERPRET)  # row g: k (1, 3), (5, 7)
    o1a, o1b = _f16_pairs(o1, INTERPRET)
    d0, d1, d2, d3 = _mma_group_f16(e0a, e1a, e0b, e1b, o0a, o1a, o0b, o1b, xb[4 * s], xb[4 * s + 1], xb[4 * s + 2],
                                    xb[4 * s + 3], NT, INTERPRET)
    return c0 + s0 * d0, c1 + s0 * d1, c2 + s1 * d2, c3 + s1 * d3


@triton.jit
def _fp4_group_scales(bs_ptr, row, kb, m, KB):
    """The row's 4 UE8M0 group scales of block kb (one int32 load: bytes s = 0..3) as fp32, and a
    word whose bits ``0x80808080`` are set where a byte is 255 (NaN). 2^(e - 127) is the bit
    pattern ``e << 23`` for e = 1..254 and ``0x400000`` (the subnormal 2^-127) for e = 0, which
    ``max`` picks; 255 gives inf here and the row is made NaN at the end (:func:`_store_tile`).
    Three integer ops a scale instead of the two compares and selects of ``_e8m0_decode``."""
    v = tl.load(bs_ptr + row * KB + kb, mask=m, other=0)
    s0 = tl.maximum((v << 23) & _EXP_BITS, _F32_2M127).to(tl.float32, bitcast=True)
    s1 = tl.maximum((v << 15) & _EXP_BITS, _F32_2M127).to(tl.float32, bitcast=True)
    s2 = tl.maximum((v << 7) & _EXP_BITS, _F32_2M127).to(tl.float32, bitcast=True)
    s3 = tl.maximum((v >> 1) & _EXP_BITS, _F32_2M127).to(tl.float32, bitcast=True)
    ff = (~v - 0x01010101) & v  # the "has a zero byte" test on ~v: bit 8i+7 set where byte i is 0xFF
    return s0, s1, s2, s3, ff


@triton.jit
def _tile_fp8(w0, w1, x, c0, c1, c2, c3, NT: tl.constexpr, INTERPRET: tl.constexpr):
    """The 4 chained MMAs of one FP8 block: rows (g, g + 8) words ``w0`` / ``w1`` (8 words each,
    as _fp8_words returns them) against one column tile's ``x``; returns C + the block's sum."""
    c0, c1, c2, c3 = _mma16832(w0[0], w1[0], w0[1], w1[1], x[0], x[1], c0, c1, c2, c3, NT, INTERPRET)
    c0, c1, c2, c3 = _mma16832(w0[2], w1[2], w0[3], w1[3], x[2], x[3], c0, c1, c2, c3, NT, INTERPRET)
    c0, c1, c2, c3 = _mma16832(w0[4], w1[4], w0[5], w1[5], x[4], x[5], c0, c1, c2, c3, NT, INTERPRET)
    c0, c1, c2, c3 = _mma16832(w0[6], w1[6], w0[7], w1[7], x[6], x[7], c0, c1, c2, c3, NT, INTERPRET)
    return c0, c1, c2, c3


@triton.jit
def _group_fp4(q0, q1, x_e, x_o, s0, s1, c0, c1, c2, c3, NT: tl.constexpr, INTERPRET: tl.constexpr):
    """One FP4 group (MMA): rows (g, g + 8) words ``q0`` / ``q1`` decoded, multiplied by the
    column tile's (even, odd) bytes, the sum scaled by the rows' group scales (s0, s1) into C."""
    z = tl.zeros([NT], dtype=tl.float32)
    d0, d1, d2, d3 = _mma16832(_e2m1_lo(q0), _e2m1_lo(q1), _e2m1_hi(q0), _e2m1_hi(q1), x_e, x_o, z, z, z, z, NT,
                               INTERPRET)
    return c0 + s0 * d0, c1 + s0 * d1, c2 + s1 * d2, c3 + s1 * d3


@triton.jit
def _block_fp4(q0, q1, sc0, sc1, x, F16: tl.constexpr, NT: tl.constexpr, INTERPRET: tl.constexpr):
    """The 4 groups of one FP4 block for one 16-row tile and one column tile: the block's sum
    (group scales applied, activation scale not yet). ``x``: :func:`_x_f16_fp4` (``F16``) or
    :func:`_x_frags_fp4`."""
    z = tl.zeros([NT], dtype=tl.float32)
    c0, c1, c2, c3 = z, z, z, z
    for s in tl.static_range(4):
        if F16:
            c0, c1, c2, c3 = _group_fp4_f16(q0[s], q1[s], x, s, sc0[s], sc1[s], c0, c1, c2, c3, NT, INTERPRET)
        else:
            c0, c1, c2, c3 = _group_fp4(q0[s], q1[s], x[2 * s], x[2 * s + 1], sc0[s], sc1[s], c0, c1, c2, c3, NT,
                                        INTERPRET)
    return c0, c1, c2, c3


@triton.jit
def _add_scaled(acc, blk, sa0, sa1):
    """acc += the block's sum times the activation scale of its column (2t: sa0, 2t + 1: sa1)."""
    return acc[0] + sa0 * blk[0], acc[1] + sa1 * blk[1], acc[2] + sa0 * blk[2], acc[3] + sa1 * blk[3]


@triton.jit
def _warp_sum(v, W: tl.constexpr):
    """[32 W] -> [32]: the W warps' partial sums of each lane's value."""
    return tl.sum(tl.reshape(v, [W, 32]), axis=0)


@triton.jit
def _store_tile(c_ptr, acc, nan_g, nan_g8, row, col, M, N, SCALE: tl.constexpr, W: tl.constexpr):
    """C[col (+1), row (+8)] = one 16-row x 8-column tile's sums over the warps (bf16); rows whose
    flag (``nan_g`` / ``nan_g8``: int32 [32 W], non-zero in any warp) is set are NaN."""
    v0 = _warp_sum(acc[0], W) * SCALE
    v1 = _warp_sum(acc[1], W) * SCALE
    v2 = _warp_sum(acc[2], W) * SCALE
    v3 = _warp_sum(acc[3], W) * SCALE
    # a flag is any set bit, bit 31 (scale byte 3) too: reduce "!= 0", not the signed int32 values
    f0 = tl.max((tl.reshape(nan_g, [W, 32]) != 0).to(tl.int32), axis=0) != 0
    f1 = tl.max((tl.reshape(nan_g8, [W, 32]) != 0).to(tl.int32), axis=0) != 0
    v0 = tl.where(f0, float("nan"), v0)
    v1 = tl.where(f0, float("nan"), v1)
    v2 = tl.where(f1, float("nan"), v2)
    v3 = tl.where(f1, float("nan"), v3)
    m0 = col < M
    m1 = col + 1 < M
    r0 = row < N
    r1 = row + 8 < N
    tl.store(c_ptr + col * N + row, v0.to(tl.bfloat16), mask=m0 & r0)
    tl.store(c_ptr + (col + 1) * N + row, v1.to(tl.bfloat16), mask=m1 & r0)
    tl.store(c_ptr + col * N + row + 8, v2.to(tl.bfloat16), mask=m0 & r1)
    tl.store(c_ptr + (col + 1) * N + row + 8, v3.to(tl.bfloat16), mask=m1 & r1)


@triton.jit
def _nan_flags(flags, blk, FP4: tl.constexpr, RT: tl.constexpr):
    """OR the loaded block's 255-byte markers (FP4 scales) into the per-(row tile, row half) flags."""
    if FP4:
        ws = blk[1]
        res = ()
        for i in tl.static_range(2 * RT):
            res = res + (flags[i] | (ws[i // 2][i % 2][4] & _SIGN),)
    else:
        res = flags
    return res


@triton.jit
def _load_block(a_ptr, as_ptr, b_ptr, bs_ptr, kb, r_base, g, t, M, N, KB: tl.constexpr, KW: tl.constexpr,
                AW: tl.constexpr, FP4: tl.constexpr, AS_E8M0: tl.constexpr, BS_E8M0: tl.constexpr, RT: tl.constexpr,
                NCT: tl.constexpr, NT: tl.constexpr):
    """Every load of K block kb (per lane; nothing past K, N or M is read): the weight words of the
    RT row tiles and their scales, the activation words and scales of the NCT column tiles."""
    m_k = kb < KB
    wq = ()
    ws = ()
    for rt in tl.static_range(RT):
        ra = r_base + 16 * rt
        rb = ra + 8
        if FP4:
            wq = wq + ((_fp4_words(b_ptr, ra, kb, t, m_k & (ra < N), KW, NT),
                        _fp4_words(b_ptr, rb, kb, t, m_k & (rb < N), KW, NT)),)
            ws = ws + ((_fp4_group_scales(bs_ptr, ra, kb, m_k & (ra < N), KB),
                        _fp4_group_scales(bs_ptr, rb, kb, m_k & (rb < N), KB)),)
        else:
            wq = wq + ((_fp8_words(b_ptr, ra, kb, t, m_k & (ra < N), KW, NT),
                        _fp8_words(b_ptr, rb, kb, t, m_k & (rb < N), KW, NT)),)
            # one weight scale per 128 rows: a 16-row tile never straddles two
            ws = ws + (load_scale(bs_ptr + (ra // 128) * KB + kb, m_k & (ra < N), BS_E8M0),)
    xs = ()
    sa = ()
    for ct in tl.static_range(NCT):
        xr = g + 8 * ct  # activation row of this lane's B column
        ca = 2 * t + 8 * ct  # activation rows of this lane's C values: ca, ca + 1
        if FP4:
            xs = xs + (_x_words_fp4(a_ptr, xr, kb, t, m_k & (xr < M), AW, NT),)
        else:
            xs = xs + (_fp8_words(a_ptr, xr, kb, t, m_k & (xr < M), AW, NT),)  # same byte order as the weight
        sa = sa + ((load_scale(as_ptr + ca * KB + kb, m_k & (ca < M), AS_E8M0),
                    load_scale(as_ptr + (ca + 1) * KB + kb, m_k & (ca + 1 < M), AS_E8M0)),)
    return wq, ws, xs, sa


@triton.jit
def _compute_block(acc, blk, z, FP4: tl.constexpr, F16: tl.constexpr, RT: tl.constexpr, NCT: tl.constexpr,
                   NT: tl.constexpr, INTERPRET: tl.constexpr):
    """acc += the MMAs of one loaded K block (``blk`` from :func:`_load_block`); acc tile (rt, ct)
    at rt * NCT + ct."""
    wq, ws, xs, sa = blk
    for ct in tl.static_range(NCT):
        if FP4:
            if F16:
                x = _x_f16_fp4(xs[ct], INTERPRET)
            else:
                x = _x_frags_fp4(xs[ct], INTERPRET)
        else:
            x = xs[ct]
        sa0, sa1 = sa[ct]
        for rt in tl.static_range(RT):
            if FP4:
                d = _block_fp4(wq[rt][0], wq[rt][1], ws[rt][0], ws[rt][1], x, F16, NT, INTERPRET)
                acc = tuple_replace(acc, rt * NCT + ct, _add_scaled(acc[rt * NCT + ct], d, sa0, sa1))
            else:
                d = _tile_fp8(wq[rt][0], wq[rt][1], x, z, z, z, z, NT, INTERPRET)
                acc = tuple_replace(acc, rt * NCT + ct, _add_scaled(acc[rt * NCT + ct], d, ws[rt] * sa0, ws[rt] * sa1))
    return acc


@triton.jit(do_not_specialize=["M"])
def _mma_gemv_kernel(
    a_ptr, as_ptr, b_ptr, bs_ptr, c_ptr, M, N, K: tl.constexpr,
    FP4: tl.constexpr, SCALE: tl.constexpr, AS_E8M0: tl.constexpr, BS_E8M0: tl.constexpr, RT: tl.constexpr,
    NCT: tl.constexpr, W: tl.constexpr, INTERPRET: tl.constexpr, F16: tl.constexpr = True,
    PDL: tl.constexpr = False, TRIGGER: tl.constexpr = False,
):
    """Program: 16 RT weight rows (RT MMA row tiles) x the M <= 8 NCT activation rows (NCT column
    tiles; each weight tile is loaded and decoded once for all of them), the K blocks split over
    the W warps. ``a_ptr`` / ``b_ptr`` are int32 views of the E4M3 activations [M, K] and of the
    weight (FP8 [N, K] or packed FP4 [N, K/2]); ``bs_ptr``: FP4 — int32 view of the UE8M0
    [N, K/32] bytes, FP8 — the [ceil(N/128), K/128] block scales. ``SCALE`` multiplies the result
    (FP4: 64, the E4M3 re-encoding being E2M1 x 2^-6). K is a compile-time constant (one compile
    per layer width) so that every word offset's divisibility is known and the loads vectorize.

    The loads of block i + W are issued before the MMAs of block i (a register double buffer):
    one block's loads per warp in flight is too little to cover the memory latency (measured:
    FP4 at M = 1 ran at 1.5 TB/s without it); two blocks ahead measured slower or equal
    (docs/design-notes.md). PDL (a launch with ``launch_pdl=True``): nothing global is touched
    before ``griddepcontrol.wait``; TRIGGER: then the next PDL launch may start."""
    if PDL:
        gdc_wait()
    if TRIGGER:
        gdc_launch_dependents()
    NT: tl.constexpr = 32 * W
    i_p = tl.program_id(0).to(tl.int64)
    o_e = tl.arange(0, NT)
    warp = o_e // 32
    lane = o_e % 32
    g = lane // 4
    t = lane % 4
    KB: tl.constexpr = K // 128
    AW: tl.constexpr = K // 4  # int32 words per activation row
    if FP4:
        KW: tl.constexpr = K // 8
    else:
        KW: tl.constexpr = K // 4
    r_base = i_p * (16 * RT) + g  # row g of tile rt: r_base + 16 rt (row g + 8: + 8)
    z = tl.zeros([NT], dtype=tl.float32)
    acc = zeros_tuple((z, z, z, z), RT * NCT)  # one (c0, c1, c2, c3) per (rt, ct)
    zi = tl.zeros([NT], dtype=tl.int32)
    nan_rows = zeros_tuple(zi, 2 * RT)  # per (row tile rt, row half h) at 2 rt + h: a 255 scale byte seen
    blk = _load_block(a_ptr, as_ptr, b_ptr, bs_ptr, warp, r_base, g, t, M, N, KB, KW, AW, FP4, AS_E8M0, BS_E8M0, RT,
                      NCT, NT)
    for it in range(0, tl.cdiv(KB, W)):
        nxt = _load_block(a_ptr, as_ptr, b_ptr, bs_ptr, (it + 1) * W + warp, r_base, g, t, M, N, KB, KW, AW, FP4,
                          AS_E8M0, BS_E8M0, RT, NCT, NT)
        acc = _compute_block(acc, blk, z, FP4, F16, RT, NCT, NT, INTERPRET)
        nan_rows = _nan_flags(nan_rows, blk, FP4, RT)
        blk = nxt
    # the warps' partial sums -> one lane set: rows / columns from the lane index alone
    o_l = tl.arange(0, 32)
    row = i_p * (16 * RT) + o_l // 4
    col = 2 * (o_l % 4)
    for rt in tl.static_range(RT):
        for ct in tl.static_range(NCT):
            _store_tile(c_ptr, acc[rt * NCT + ct], nan_rows[2 * rt], nan_rows[2 * rt + 1], row + 16 * rt, col + 8 * ct,
                        M, N, SCALE, W)


#: Weight bytes (codes and scales) up to which a launch counts as short: its launch, first DRAM
#: round trip and tail are a large share of it. Short launches run as a programmatic dependent
#: launch with the early trigger and are compiled with ptxas -O1 (at -O3 ptxas sinks the next K
#: block's loads below this block's MMAs; at -O1 every load is issued first, 84 registers against
#: 62). Both together were 7-11% faster on the short benchmark weights and slower on the long
#: ones, where the extra registers cost occupancy over several waves (docs/gemm.md).
SHORT_LAUNCH_BYTES = 32 << 20


class MmaGemvConfig(NamedTuple):
    """Launch configuration of :func:`mma_gemv`.

    ``rt`` row tiles of 16 a program (1 or 2), ``warps`` (a power of two) splitting K; ``decode``
    (FP4 only): "f16" decodes each code straight to the fp16 bits of its value x 2^-14 by integer
    ops and one ``prmt`` a pair, "e4m3" re-encodes it as an E4M3 byte (x 2^-6) and converts that
    with ``cvt.rn.f16x2.e4m3x2`` -- bit-identical results; ``pdl``: a programmatic dependent launch
    with the early trigger; ``ptxas``: extra ptxas options (None: Triton's -O3)."""

    rt: int
    warps: int
    decode: str = "e4m3"
    pdl: bool = False
    ptxas: str | None = None


def weight_bytes(n: int, k: int, fp4: bool) -> int:
    """Bytes of one [N, K] weight as :func:`mma_gemv` reads it: FP4 codes (K/2 a row) with one UE8M0
    byte a 32-group, or E4M3 codes with one fp32 scale a 128 x 128 tile."""
    if fp4:
        return n * k // 2 + n * (k // 32)
    return n * k + 4 * (-(-n // 128)) * (k // 128)


def pick_config(n: int, k: int, m: int = 1, fp4: bool = True) -> MmaGemvConfig:
    """The launch configuration for M rows against an [N, K] weight, from same-run sweeps on the
    H200 (the five (N, K) of the benchmark at M = 1 and 16; docs/gemm.md):

    * W: about four to seven K blocks per warp (W = 8 from 32 blocks, 4 from 16, else 2), best or
      within 3% of the best everywhere; FP4 at K >= 12288 wants two row tiles, and half the warps
      when it also has two column tiles.
    * decode: "f16" from two column tiles (M > 8), where it measured 1-5% faster, else "e4m3"
      (0-3% faster at M = 1).
    * pdl / ptxas: a short launch (:data:`SHORT_LAUNCH_BYTES`) runs as a PDL launch built with
      ptxas -O1."""
    kb = k // 128
    w = 8 if kb >= 32 else 4 if kb >= 16 else 2
    rt = 1
    if fp4 and kb >= 96:
        rt = 2
        if m > 8:
            w = max(1, w // 2)
    short = weight_bytes(n, k, fp4) <= SHORT_LAUNCH_BYTES
    return MmaGemvConfig(rt, w, "f16" if m > 8 else "e4m3", short, "-O1" if short else None)


def mma_gemv(a: torch.Tensor, a_s: torch.Tensor, b: torch.Tensor, b_s: torch.Tensor, fp4: bool,
             config: MmaGemvConfig | tuple | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """a e4m3 [M, K] (M <= 64, K % 128 == 0, contiguous), a_s [M, K/128] fp32 / e8m0 (contiguous);
    b: FP8 e4m3 [N, K] with b_s [ceil(N/128), K/128], or (``fp4``) packed uint8 [N, K/2] with UE8M0
    uint8 b_s [N, K/32], contiguous; the int32 views of a, b and (FP4) b_s need 16-byte aligned
    storage. Returns bf16 [M, N] (``out`` if given: every element is written). ``config``: a
    :class:`MmaGemvConfig` (or its fields as a tuple; default :func:`pick_config`)."""
    m, k = a.shape
    n = b.shape[0]
    if not 1 <= m <= MAX_M:
        raise ValueError(f"mma_gemv serves 1 <= M <= {MAX_M}, got a of shape {tuple(a.shape)}")
    cfg = MmaGemvConfig(*config) if config is not None else pick_config(n, k, m, fp4)
    if cfg.decode not in FP4_RESULT_SCALE:
        raise ValueError(f"mma_gemv decode must be one of {sorted(FP4_RESULT_SCALE)}, got {cfg.decode!r}")
    if cfg.rt not in (1, 2) or cfg.warps < 1 or cfg.warps & (cfg.warps - 1):
        raise ValueError(f"mma_gemv config needs rt in (1, 2) and warps a power of two, got {tuple(cfg)}")
    c = torch.empty(m, n, dtype=torch.bfloat16, device=a.device) if out is None else out
    as_e8m0 = a_s.dtype == torch.float8_e8m0fnu
    bs_e8m0 = b_s.dtype == torch.float8_e8m0fnu
    a32 = a.view(torch.uint8).view(torch.int32)
    b32 = b.view(torch.uint8).view(torch.int32)
    if fp4:
        bs = b_s.view(torch.uint8).view(torch.int32)
    else:
        bs = b_s.view(torch.uint8) if bs_e8m0 else b_s
    asv = a_s.view(torch.uint8) if as_e8m0 else a_s
    grid = (triton.cdiv(n, 16 * cfg.rt),)
    _mma_gemv_kernel[grid](a32, asv, b32, bs, c, m, n, k, FP4=fp4,
                           SCALE=FP4_RESULT_SCALE[cfg.decode] if fp4 else 1.0, AS_E8M0=as_e8m0, BS_E8M0=bs_e8m0,
                           RT=cfg.rt, NCT=-(-m // 8), W=cfg.warps, INTERPRET=interpret_mode(),
                           F16=cfg.decode == "f16", num_warps=cfg.warps, num_stages=1,
                           **launch_options(a.device, cfg.pdl, cfg.pdl, cfg.ptxas))
    return c
