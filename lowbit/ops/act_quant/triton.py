"""Triton kernels for ``act_quant`` / ``fp4_act_quant`` / ``weight_dequant``.

One pass over x: each program owns ``BLOCK_G`` consecutive groups of ``BS`` elements of the
flattened (contiguous) input. Bit-exact with :mod:`.reference`: quotients are IEEE (``tl.div_rn``,
or the same bits from one reciprocal a group: :func:`_div_exact`; Triton's ``/`` on fp32 is
approximate), the power-of-two scales are exponent-bit arithmetic, clamps are written with
``tl.where`` so a NaN survives them as in torch, and a NaN anywhere in a group reaches its amax
through a NaN-propagating max (``tl.max`` may drop NaN).
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from lowbit._backend import interpret_mode
from lowbit.ops._scales import e8m0_decode
from lowbit.ops._triton_pdl import launch_options

__all__ = ["ACT_QUANT_CONFIG", "FP4_ACT_QUANT_CONFIG", "PDL_MAX_ROWS", "ActQuantConfig", "Fp4ActQuantConfig", "act_quant",
           "act_quant_inplace", "fp4_act_quant", "fp4_act_quant_inplace", "pdl_launch", "weight_dequant"]

# constexpr: a @triton.jit function may only read module globals that are tl.constexpr
_E4M3_MAX = tl.constexpr(448.0)
_E2M1_MAX = tl.constexpr(6.0)


@triton.jit
def _pow2_ceil_byte(t):
    """UE8M0 byte (int32) of 2^ceil(log2(t)) for positive fp32 t; Inf/NaN/too large -> 255."""
    b = t.to(tl.int32, bitcast=True)
    exp = (b >> 23) & 0xFF
    e = exp + ((b & 0x7FFFFF) != 0).to(tl.int32)
    bad = (exp == 0xFF) | (e > 254) | (t != t)
    return tl.where(bad, 255, e)


@triton.jit
def _to_e4m3(v, INTERPRET: tl.constexpr):
    """fp32 (already within +-448) -> float8e4nv, round-to-nearest-even.

    On the GPU the cast is ``cvt.rn.satfinite`` (RNE). The 3.6 interpreter's cast does not round
    to nearest-even (ties and subnormals differ), so there the value is first rounded onto the
    E4M3 grid explicitly (step 2^(max(e, -6) - 3)), after which the cast is exact.
    """
    if INTERPRET:
        b = v.to(tl.int32, bitcast=True)
        e = ((b >> 23) & 0xFF) - 127
        step = ((tl.maximum(e, -6) - 3 + 127) << 23).to(tl.float32, bitcast=True)
        magic = step * 12582912.0  # 1.5 * 2^23 * step: fp32 add rounds v to a multiple of step, RNE
        r = ((v + magic) - magic).to(tl.float8e4nv).to(tl.uint8, bitcast=True).to(tl.int32)
        # the add turns a negative value that rounds to 0 into +0; the GPU's cast keeps its sign
        r = r | ((b >> 24) & 0x80)
        # the interpreter also casts NaN to a finite byte: force E4M3's NaN, 0x7F
        return tl.where(v != v, 0x7F, r).to(tl.uint8).to(tl.float8e4nv, bitcast=True)
    return v.to(tl.float8e4nv)


@triton.jit
def _to_out(v, dtype: tl.constexpr, INTERPRET: tl.constexpr):
    """fp32 -> dtype with RNE. The interpreter's fp32 -> bf16 cast truncates, so there the value is
    rounded to bf16 precision with integer arithmetic first (NaN/Inf are left alone)."""
    if INTERPRET and dtype == tl.bfloat16:
        b = v.to(tl.int32, bitcast=True)
        r = ((b + 0x7FFF + ((b >> 16) & 1)) & -65536).to(tl.float32, bitcast=True)
        v = tl.where((b & 0x7F800000) == 0x7F800000, v, r)
    return v.to(dtype)


@triton.jit
def _clamp_keep_nan(v, lim):
    return tl.where(v > lim, lim, tl.where(v < -lim, -lim, v))


@triton.jit
def _fma(a, b, c, INTERPRET: tl.constexpr):
    """fp32 a * b + c with one rounding. The interpreter's fma rounds the product first; there the
    product is formed in fp64 (exact for fp32 operands) and the sum rounded from fp64."""
    if INTERPRET:
        return (a.to(tl.float64) * b.to(tl.float64) + c.to(tl.float64)).to(tl.float32)
    return tl.fma(a, b, c)


@triton.jit
def _div_exact(x, s, r, POW2: tl.constexpr, INTERPRET: tl.constexpr):
    """IEEE fp32 x / s (bit-identical to ``tl.div_rn``) from ``r = div_rn(1, s)``, computed once per
    group, without a division per element.

    * POW2 (UE8M0 scales, normal powers of two): x * r is the same correctly rounded value.
    * otherwise two Markstein corrections: q1 = q0 + (x - s q0) r is faithful, after which one
      more correction is the correctly rounded quotient (r is the correctly rounded 1/s; the
      remainders are exact FMAs). The remainder is formed as s q - x and subtracted, so a -0 input
      keeps its sign. s = inf (an inf in the group) has r = 0: the remainder's s is replaced by 0,
      which leaves q = x * 0 (or NaN for an inf x), as x / inf. NaN s, r: NaN throughout.
      Quotients small enough to underflow in the remainders are far below E4M3's smallest
      subnormal; they keep their sign. tests/ops/test_act_quant.py checks the sequence against
      true division with an exact fp32 FMA emulation.
    """
    q = x * r
    if not POW2:
        s_r = tl.where(s == float("inf"), 0.0, s)
        # negation as * -1 (Triton's unary minus is 0 - v, which turns -0 into +0)
        n_x = x * -1.0
        q = _fma(_fma(s_r, q, n_x, INTERPRET) * -1.0, r, q, INTERPRET)
        q = _fma(_fma(s_r, q, n_x, INTERPRET) * -1.0, r, q, INTERPRET)
    return q


@triton.jit
def _nanmax(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _act_quant_kernel(
    x_ptr, y_ptr, s_ptr, n_groups,
    BS: tl.constexpr, BLOCK_G: tl.constexpr, UE8M0: tl.constexpr, S_E8M0: tl.constexpr, INPLACE: tl.constexpr,
    INTERPRET: tl.constexpr, PDL: tl.constexpr = False, TRIGGER: tl.constexpr = False,
):
    """Groups [pid * BLOCK_G, (pid + 1) * BLOCK_G) of x, division-free (:func:`_div_exact`: one
    reciprocal a group, the same bits as a division per element). PDL (a launch with
    ``launch_pdl=True``): nothing global is touched before ``griddepcontrol.wait`` (the previous
    kernel may have written x); TRIGGER then lets the next PDL launch (the GEMM) start early."""
    if PDL:
        gdc_wait()
        if TRIGGER:
            gdc_launch_dependents()
    o_g = tl.program_id(0).to(tl.int64) * BLOCK_G + tl.arange(0, BLOCK_G)
    m_g = o_g < n_groups
    o_x = o_g[:, None] * BS + tl.arange(0, BS)[None, :]
    # [BLOCK_G, BS]
    b_x = tl.load(x_ptr + o_x, mask=m_g[:, None], other=0.0).to(tl.float32)
    # NaN-propagating amax (one max.NaN per element): a NaN group gets a NaN amax, hence a NaN
    # scale (UE8M0 byte 255) and NaN values without a separate NaN reduction; the 1e-4 floor is a
    # where() so it keeps the NaN
    amax = tl.reduce(tl.abs(b_x), 1, _nanmax)
    has_nan = amax != amax
    amax = tl.where(amax < 1e-4, 1e-4, amax)
    if UE8M0:
        e = _pow2_ceil_byte(amax * (1.0 / 448.0))
        s = e8m0_decode(e)
    else:
        s = tl.div_rn(amax, _E4M3_MAX)
    s = tl.where(has_nan, float("nan"), s)  # per group: cheap
    v = _div_exact(b_x, s[:, None], tl.div_rn(1.0, s)[:, None], UE8M0, INTERPRET)
    if INTERPRET:  # the GPU's cvt.rn.satfinite already saturates to +-448 and keeps NaN
        v = _clamp_keep_nan(v, _E4M3_MAX)
    b_y = _to_e4m3(v, INTERPRET)
    if INPLACE:
        b_q = b_y.to(tl.float32) * s[:, None]
        tl.store(x_ptr + o_x, _to_out(b_q, x_ptr.dtype.element_ty, INTERPRET), mask=m_g[:, None])
    else:
        tl.store(y_ptr + o_x, b_y, mask=m_g[:, None])
        if S_E8M0:
            tl.store(s_ptr + o_g, e.to(tl.uint8), mask=m_g)
        else:
            tl.store(s_ptr + o_g, s, mask=m_g)


@triton.jit
def _e2m1_value(code):
    """fp32 value of an E2M1 code (int32 0..15)."""
    mag = (code & 7).to(tl.float32)
    # codes 0..7 -> 0, 0.5, 1, 1.5 | 2, 3 | 4, 6
    val = tl.where(mag < 4.0, mag * 0.5, tl.where(mag < 6.0, mag - 2.0, (mag - 4.0) * 2.0))
    # sign by bit so code 0x8 gives -0.0 (negation as 0 - x would give +0.0)
    return (val.to(tl.int32, bitcast=True) | ((code & 8) << 28)).to(tl.float32, bitcast=True)


@triton.jit
def _e2m1_mag(a):
    """RNE E2M1 magnitude code (int32 0..7) of a = |v| >= 0 (fp32, may be inf; not NaN: the caller
    masks NaN groups), by fp32 / integer bit arithmetic instead of seven comparisons.

    * a < 2 (grid step 0.5): fp32 a + 2^22 rounds a to a multiple of 0.5 with RNE (the ulp of
      [2^22, 2^23) is 0.5) and its mantissa bits count the steps: codes 0..4 (0.25 -> 0,
      0.75 -> 2, 1.25 -> 2, 1.75 -> 4, as the reference's thresholds).
    * a >= 2: round a's mantissa to one bit with RNE in the integer domain (add 0x1FFFFF plus the
      kept bit, truncate); (bits >> 22) - 252 is the code (2 -> 4, 3 -> 5, 4 -> 6, 6 -> 7, 5 -> 6,
      3.5 -> 6, 2.5 -> 4), saturated at 7 (past 6, inf).
    """
    small = (a + 4194304.0).to(tl.int32, bitcast=True) - 0x4A800000
    b = a.to(tl.int32, bitcast=True)
    big = ((b + 0x1FFFFF + ((b >> 22) & 1)) >> 22) - 252
    return tl.where(a < 2.0, small, tl.minimum(big, 7))


@triton.jit
def _fp4_act_quant_kernel(
    x_ptr, q_ptr, s_ptr, n_groups,
    BS: tl.constexpr, BLOCK_G: tl.constexpr, E4M3_SCALE: tl.constexpr, INPLACE: tl.constexpr,
    INTERPRET: tl.constexpr,
):
    """``fp4_act_quant`` with contiguous group loads and no division per element (UE8M0), same bits.

    Each program loads ``BLOCK_G`` whole groups as one [BLOCK_G, BS] tile (16-byte vector loads),
    splits even / odd elements in registers (reshape [BLOCK_G, BS/2, 2] + split), and stores the
    packed bytes contiguously. Numerics (equal to :mod:`.reference` bit for bit):

    * amax: NaN-propagating max; a group with a NaN (UE8M0: or an inf, whose scale byte is 255)
      gets a NaN scale and all-zero codes (the byte mask below), as ``x / NaN`` gives in the
      reference.
    * UE8M0: v = x * 2^(127-e), the exact reciprocal of s = 2^(e-127), built from exponent bits:
      the same correctly rounded value as x / s (one rounding of the same real number; fp32 mul
      is not flushed to zero). The amax floor keeps e >= 1 and a finite amax keeps e <= 253
      (fp32 max * f32(1/6) < 2^126), so 1/s is a normal fp32; the unreachable e = 254 would still
      be exact (2^-127 is the subnormal 0x00400000).
    * E4M3 scales: IEEE division per element (``tl.div_rn``).
    """
    HALF: tl.constexpr = BS // 2
    o_g = tl.program_id(0).to(tl.int64) * BLOCK_G + tl.arange(0, BLOCK_G)
    m_g = o_g < n_groups
    o_x = o_g[:, None] * BS + tl.arange(0, BS)[None, :]
    # [BLOCK_G, BS]
    if INTERPRET and x_ptr.dtype.element_ty == tl.bfloat16:
        # the 3.6 interpreter's bf16 -> fp32 cast mangles subnormals: widen the bits instead (the
        # GPU's cast is this shift)
        b_x = tl.load(x_ptr.to(tl.pointer_type(tl.int16)) + o_x, mask=m_g[:, None], other=0)
        b_x = (b_x.to(tl.int32) << 16).to(tl.float32, bitcast=True)
    else:
        b_x = tl.load(x_ptr + o_x, mask=m_g[:, None], other=0.0).to(tl.float32)
    amax = tl.reduce(tl.abs(b_x), 1, _nanmax)
    if E4M3_SCALE:
        t = tl.div_rn(amax, _E2M1_MAX)
        t = tl.where(t < 2.0**-9, 2.0**-9, t)  # where(): a NaN amax stays NaN (E4M3 0x7F)
        s8 = _to_e4m3(tl.where(t > _E4M3_MAX, _E4M3_MAX, t), INTERPRET)
        s = s8.to(tl.float32)
        bad = t != t  # a NaN in the group (an inf gives s = 448)
        s = tl.where(bad, float("nan"), s)  # the interpreter's E4M3 -> fp32 cast makes NaN finite
        s2 = s[:, None]
        v = tl.div_rn(b_x, s2)
        neg = v < 0
    else:
        e = _pow2_ceil_byte(tl.where(amax < 6.0 * 2.0**-126, 6.0 * 2.0**-126, amax) * (1.0 / 6.0))
        bad = e == 255  # NaN or inf in the group: NaN scale
        s2 = e8m0_decode(e)[:, None]
        v = b_x * e8m0_decode(tl.where(bad, 255, 254 - e))[:, None]
        neg = v < 0
    c = _e2m1_mag(tl.abs(v)) | (neg.to(tl.int32) << 3)
    if INPLACE:
        c = tl.where(bad[:, None], 0, c)
        tl.store(x_ptr + o_x, _to_out(_e2m1_value(c) * s2, x_ptr.dtype.element_ty, INTERPRET), mask=m_g[:, None])
    else:
        # element 2i in the low nibble: pairs are adjacent in a thread's registers
        c_e, c_o = tl.split(tl.reshape(c, (BLOCK_G, HALF, 2)))
        byte = tl.where(bad[:, None], 0, c_e | (c_o << 4))
        o_q = o_g[:, None] * HALF + tl.arange(0, HALF)[None, :]
        tl.store(q_ptr + o_q, byte.to(tl.uint8), mask=m_g[:, None])
        if E4M3_SCALE:
            tl.store(s_ptr + o_g, s8, mask=m_g)
        else:
            tl.store(s_ptr + o_g, e.to(tl.uint8), mask=m_g)


@triton.jit
def _weight_dequant_kernel(
    w_ptr, s_ptr, out_ptr, N, K, n_sk,
    BS: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, S_E8M0: tl.constexpr, INTERPRET: tl.constexpr,
):
    i_n = tl.program_id(0).to(tl.int64)
    i_k = tl.program_id(1).to(tl.int64)
    o_n = i_n * BLOCK_N + tl.arange(0, BLOCK_N)
    o_k = i_k * BLOCK_K + tl.arange(0, BLOCK_K)
    m = (o_n < N)[:, None] & (o_k < K)[None, :]
    # [BLOCK_N, BLOCK_K]
    b_w = tl.load(w_ptr + o_n[:, None] * K + o_k[None, :], mask=m, other=0.0).to(tl.float32)
    p_s = s_ptr + (o_n // BS)[:, None] * n_sk + (o_k // BS)[None, :]
    if S_E8M0:
        b_s = e8m0_decode(tl.load(p_s, mask=m, other=127).to(tl.int32))
    else:
        b_s = tl.load(p_s, mask=m, other=1.0)
    tl.store(out_ptr + o_n[:, None] * K + o_k[None, :], _to_out(b_w * b_s, out_ptr.dtype.element_ty, INTERPRET), mask=m)


class ActQuantConfig(NamedTuple):
    """Launch config of :func:`act_quant`: ``elems`` elements per program (a multiple of the block
    size), ``warps`` num_warps."""

    elems: int = 2048
    warps: int = 2


class Fp4ActQuantConfig(NamedTuple):
    """Launch config of :func:`fp4_act_quant`: ``elems`` elements per program (a multiple of the
    block size), ``warps`` num_warps."""

    elems: int = 4096
    warps: int = 4


# Launch configs of the memory-bound quantizers, from ``lowbit tune act_quant`` on the H200 ([8192,
# 7168] bf16, cold L2): act_quant 46.9 us = 89% of copy bandwidth (fp32 scales; UE8M0 alike), the
# lowest worst case of both scale formats; fp4_act_quant 70.5 us (UE8M0 / 32) and 78.0 us (E4M3 /
# 16), 50% / 46% of copy bandwidth (docs/gemm.md).
ACT_QUANT_CONFIG = ActQuantConfig(2048, 2)
FP4_ACT_QUANT_CONFIG = Fp4ActQuantConfig(4096, 4)
#: act_quant of x with at most this many rows runs as a programmatic dependent launch with the
#: early trigger, so that in a decode step's ``Linear`` (act_quant -> fp8_gemm / fp4_gemm) the GEMM,
#: itself a PDL launch at decode sizes, is placed while act_quant runs and act_quant while the
#: previous kernel drains: at M = 1 / 4 0.8-1.4 us a layer faster on 15 of 20 layer-stack cases, at
#: most 0.25 us slower on the others; at M = 16 up to 4 us slower on fp4 (docs/gemm.md).
PDL_MAX_ROWS = 8


def pdl_launch(x: torch.Tensor) -> bool:
    """Whether act_quant of x runs as a PDL launch: x has at most ``PDL_MAX_ROWS`` rows
    (x.numel() / x.shape[-1])."""
    return x.numel() <= PDL_MAX_ROWS * x.shape[-1]


def _launch_act_quant(x, y, s, n_groups, block_size, ue8m0, e8m0_scale, inplace, config):
    cfg = ActQuantConfig(*(config or ACT_QUANT_CONFIG))
    bg = max(1, cfg.elems // block_size)
    _act_quant_kernel[(triton.cdiv(n_groups, bg),)](
        x, y, s, n_groups, BS=block_size, BLOCK_G=bg, UE8M0=ue8m0, S_E8M0=e8m0_scale, INPLACE=inplace,
        INTERPRET=interpret_mode(), num_warps=cfg.warps, **launch_options(x.device, pdl_launch(x), True, None),
    )


def act_quant(x: torch.Tensor, block_size: int, ue8m0: bool, e8m0_scale: bool, config=None):
    """Launch on a contiguous x; returns (y e4m3 like x, s [..., K/bs] fp32 or float8_e8m0fnu).

    ``config`` (an :class:`ActQuantConfig` or an (elements, warps) pair) overrides
    ``ACT_QUANT_CONFIG`` (tuning)."""
    n_groups = x.numel() // block_size
    y = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
    s_shape = (*x.shape[:-1], x.shape[-1] // block_size)
    if e8m0_scale:
        s = torch.empty(s_shape, dtype=torch.float8_e8m0fnu, device=x.device)
        s_arg = s.view(torch.uint8)
    else:
        s = s_arg = torch.empty(s_shape, dtype=torch.float32, device=x.device)
    if n_groups:
        _launch_act_quant(x, y, s_arg, n_groups, block_size, ue8m0, e8m0_scale, False, config)
    return y, s


def act_quant_inplace(x: torch.Tensor, block_size: int, ue8m0: bool, config=None) -> None:
    """Overwrite contiguous x with its FP8 quantize-dequantize round trip."""
    n_groups = x.numel() // block_size
    if n_groups:
        _launch_act_quant(x, x, x, n_groups, block_size, ue8m0, False, True, config)


def _launch_fp4(x, q, s, n_groups, block_size, e4m3_scale, inplace, config):
    cfg = Fp4ActQuantConfig(*(config or FP4_ACT_QUANT_CONFIG))
    bg = max(1, cfg.elems // block_size)
    _fp4_act_quant_kernel[(triton.cdiv(n_groups, bg),)](
        x, q, s, n_groups, BS=block_size, BLOCK_G=bg, E4M3_SCALE=e4m3_scale, INPLACE=inplace,
        INTERPRET=interpret_mode(), num_warps=cfg.warps,
    )


def fp4_act_quant(x: torch.Tensor, block_size: int, e4m3_scale: bool, config=None):
    """Launch on a contiguous x; returns (packed uint8 [..., K/2], s [..., K/bs] e8m0 or e4m3).

    ``config`` (an :class:`Fp4ActQuantConfig` or an (elements, warps) pair) overrides
    ``FP4_ACT_QUANT_CONFIG`` (tuning)."""
    n_groups = x.numel() // block_size
    q = torch.empty((*x.shape[:-1], x.shape[-1] // 2), dtype=torch.uint8, device=x.device)
    s_shape = (*x.shape[:-1], x.shape[-1] // block_size)
    if e4m3_scale:
        s = s_arg = torch.empty(s_shape, dtype=torch.float8_e4m3fn, device=x.device)
    else:
        s = torch.empty(s_shape, dtype=torch.float8_e8m0fnu, device=x.device)
        s_arg = s.view(torch.uint8)
    if n_groups:
        _launch_fp4(x, q, s_arg, n_groups, block_size, e4m3_scale, False, config)
    return q, s


def fp4_act_quant_inplace(x: torch.Tensor, block_size: int, e4m3_scale: bool, config=None) -> None:
    """Overwrite contiguous x with its FP4 quantize-dequantize round trip."""
    n_groups = x.numel() // block_size
    if n_groups:
        _launch_fp4(x, x, x, n_groups, block_size, e4m3_scale, True, config)


def weight_dequant(w: torch.Tensor, s: torch.Tensor, block_size: int, dtype: torch.dtype) -> torch.Tensor:
    n, k = w.shape
    out = torch.empty((n, k), dtype=dtype, device=w.device)
    s_e8m0 = s.dtype == torch.float8_e8m0fnu
    s_arg = s.view(torch.uint8) if s_e8m0 else s
    bn, bk = 64, 128
    if n and k:
        _weight_dequant_kernel[(triton.cdiv(n, bn), triton.cdiv(k, bk))](
            w, s_arg, out, n, k, s.shape[1], BS=block_size, BLOCK_N=bn, BLOCK_K=bk, S_E8M0=s_e8m0,
            INTERPRET=interpret_mode(), num_warps=4,
        )
    return out
