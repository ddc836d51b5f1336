"""Triton kernels for ``act_quant`` / ``fp4_act_quant`` / ``weight_dequant``.

One pass over x: each program owns ``BLOCK_G`` consecutive groups of ``BS`` elements of the
flattened (contiguous) input. Bit-exact with :mod:`.reference`: divisions are IEEE
(``tl.div_rn``; Triton's ``/`` on fp32 is approximate), the power-of-two scales are exponent-bit
arithmetic, clamps are written with ``tl.where`` so a NaN survives them as in torch, and a NaN
anywhere in a group is propagated to its amax explicitly (``tl.max`` may drop NaN).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from lowbit._backend import interpret_mode

# constexpr: a @triton.jit function may only read module globals that are tl.constexpr
_E4M3_MAX = tl.constexpr(448.0)
_E2M1_MAX = tl.constexpr(6.0)
_F32_NAN_BITS = tl.constexpr(0x7FC00000)
_F32_2M127_BITS = tl.constexpr(0x00400000)  # 2^-127, the fp32 subnormal UE8M0 byte 0 decodes to


@triton.jit
def _pow2_ceil_byte(t):
    """UE8M0 byte (int32) of 2^ceil(log2(t)) for positive fp32 t; Inf/NaN/too large -> 255."""
    b = t.to(tl.int32, bitcast=True)
    exp = (b >> 23) & 0xFF
    e = exp + ((b & 0x7FFFFF) != 0).to(tl.int32)
    bad = (exp == 0xFF) | (e > 254) | (t != t)
    return tl.where(bad, 255, e)


@triton.jit
def _e8m0_decode(e):
    """UE8M0 byte (int32 0..255) -> fp32 2^(e-127); 0 -> 2^-127 (subnormal), 255 -> NaN."""
    bits = tl.where(e == 0, _F32_2M127_BITS, e << 23)
    bits = tl.where(e == 255, _F32_NAN_BITS, bits)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _to_e4m3(v, INTERPRET: tl.constexpr):
    """fp32 (already within +-448) -> float8e4nv, round-to-nearest-even.

    On the GPU the cast is ``cvt.rn.satfinite`` (RNE). The 3.6 interpreter's cast does not round
    to nearest-even (ties and subnormals differ), so there the value is first rounded onto the
    E4M3 grid explicitly (step 2^(max(e, -6) - 3)), after which the cast is exact.
    """
    if INTERPRET:
        e = ((v.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127
        step = ((tl.maximum(e, -6) - 3 + 127) << 23).to(tl.float32, bitcast=True)
        magic = step * 12582912.0  # 1.5 * 2^23 * step: fp32 add rounds v to a multiple of step, RNE
        r = ((v + magic) - magic).to(tl.float8e4nv).to(tl.uint8, bitcast=True)
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
def _act_quant_kernel(
    x_ptr, y_ptr, s_ptr, n_groups,
    BS: tl.constexpr, BLOCK_G: tl.constexpr, UE8M0: tl.constexpr, S_E8M0: tl.constexpr, INPLACE: tl.constexpr,
    INTERPRET: tl.constexpr,
):
    i_g = tl.program_id(0).to(tl.int64)
    o_g = i_g * BLOCK_G + tl.arange(0, BLOCK_G)
    m_g = o_g < n_groups
    o_x = o_g[:, None] * BS + tl.arange(0, BS)[None, :]
    # [BLOCK_G, BS]
    b_x = tl.load(x_ptr + o_x, mask=m_g[:, None], other=0.0).to(tl.float32)
    amax = tl.maximum(tl.max(tl.abs(b_x), axis=1), 1e-4)
    if UE8M0:
        e = _pow2_ceil_byte(amax * (1.0 / 448.0))
        s = _e8m0_decode(e)
    else:
        s = tl.div_rn(amax, _E4M3_MAX)
    # amax of a group with a NaN is NaN (tl.maximum above may have dropped it)
    has_nan = tl.max((b_x != b_x).to(tl.int32), axis=1) > 0
    s = tl.where(has_nan, float("nan"), s)
    if UE8M0:
        e = tl.where(has_nan, 255, e)
    b_y = _to_e4m3(_clamp_keep_nan(tl.div_rn(b_x, s[:, None]), _E4M3_MAX), INTERPRET)
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
def _e2m1_code(v):
    """RNE E2M1 code (int32 0..15) of fp32 v already clamped to [-6, 6]; NaN -> 0."""
    a = tl.abs(v)
    mag = ((a > 0.25).to(tl.int32) + (a >= 0.75).to(tl.int32) + (a > 1.25).to(tl.int32)
           + (a >= 1.75).to(tl.int32) + (a > 2.5).to(tl.int32) + (a >= 3.5).to(tl.int32)
           + (a > 5.0).to(tl.int32))
    return mag | ((v < 0).to(tl.int32) << 3)


@triton.jit
def _e2m1_value(code):
    """fp32 value of an E2M1 code (int32 0..15)."""
    mag = (code & 7).to(tl.float32)
    # codes 0..7 -> 0, 0.5, 1, 1.5 | 2, 3 | 4, 6
    val = tl.where(mag < 4.0, mag * 0.5, tl.where(mag < 6.0, mag - 2.0, (mag - 4.0) * 2.0))
    # sign by bit so code 0x8 gives -0.0 (negation as 0 - x would give +0.0)
    return (val.to(tl.int32, bitcast=True) | ((code & 8) << 28)).to(tl.float32, bitcast=True)


@triton.jit
def _fp4_act_quant_kernel(
    x_ptr, q_ptr, s_ptr, n_groups,
    BS: tl.constexpr, BLOCK_G: tl.constexpr, E4M3_SCALE: tl.constexpr, INPLACE: tl.constexpr,
    INTERPRET: tl.constexpr,
):
    HALF: tl.constexpr = BS // 2
    i_g = tl.program_id(0).to(tl.int64)
    o_g = i_g * BLOCK_G + tl.arange(0, BLOCK_G)
    m_g = (o_g < n_groups)[:, None]
    o_pair = o_g[:, None] * HALF + tl.arange(0, HALF)[None, :]
    # even / odd elements of each group: [BLOCK_G, BS/2] each (they share cache lines)
    b_xe = tl.load(x_ptr + 2 * o_pair, mask=m_g, other=0.0).to(tl.float32)
    b_xo = tl.load(x_ptr + 2 * o_pair + 1, mask=m_g, other=0.0).to(tl.float32)
    amax = tl.maximum(tl.max(tl.abs(b_xe), axis=1), tl.max(tl.abs(b_xo), axis=1))
    has_nan = (tl.max((b_xe != b_xe).to(tl.int32), axis=1) + tl.max((b_xo != b_xo).to(tl.int32), axis=1)) > 0
    if E4M3_SCALE:
        s8 = _to_e4m3(tl.minimum(tl.maximum(tl.div_rn(amax, _E2M1_MAX), 2.0**-9), _E4M3_MAX), INTERPRET)
        s = tl.where(has_nan, float("nan"), s8.to(tl.float32))
    else:
        e = _pow2_ceil_byte(tl.maximum(amax, 6.0 * 2.0**-126) * (1.0 / 6.0))
        e = tl.where(has_nan, 255, e)
        s = _e8m0_decode(e)
    v_e = _clamp_keep_nan(tl.div_rn(b_xe, s[:, None]), _E2M1_MAX)
    v_o = _clamp_keep_nan(tl.div_rn(b_xo, s[:, None]), _E2M1_MAX)
    c_e = _e2m1_code(v_e)
    c_o = _e2m1_code(v_o)
    if INPLACE:
        tl.store(x_ptr + 2 * o_pair, _to_out(_e2m1_value(c_e) * s[:, None], x_ptr.dtype.element_ty, INTERPRET), mask=m_g)
        tl.store(x_ptr + 2 * o_pair + 1, _to_out(_e2m1_value(c_o) * s[:, None], x_ptr.dtype.element_ty, INTERPRET), mask=m_g)
    else:
        tl.store(q_ptr + o_pair, (c_e | (c_o << 4)).to(tl.uint8), mask=m_g)
        o_s = o_g
        if E4M3_SCALE:
            tl.store(s_ptr + o_s, s8, mask=o_g < n_groups)
        else:
            tl.store(s_ptr + o_s, e.to(tl.uint8), mask=o_g < n_groups)


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
        b_s = _e8m0_decode(tl.load(p_s, mask=m, other=127).to(tl.int32))
    else:
        b_s = tl.load(p_s, mask=m, other=1.0)
    tl.store(out_ptr + o_n[:, None] * K + o_k[None, :], _to_out(b_w * b_s, out_ptr.dtype.element_ty, INTERPRET), mask=m)


# Launch config of the memory-bound act-quant kernels: (elements per program, num_warps).
# scripts/tune_gemm.py on the H200, act_quant of [8192, 7168] bf16 (fp32 scales), cold L2, copy of
# the same tensor 60.8 us (3865 GB/s): (4096, 4) 60.5 us = 76% of copy bandwidth; (2048, 4) 59.3;
# (4096, 8) 60.6; (8192, 4) 72.8; (8192, 8) 65.9; (16384, 8) 75.6; (32768, 16) 83.6 us.
ACT_QUANT_CONFIG = (4096, 4)


def _launch_shape(bs: int, config=None):
    """(groups per program, num_warps) for block size bs; config = (elements per program, warps)."""
    elems, warps = config or ACT_QUANT_CONFIG
    return max(1, elems // bs), warps


def act_quant(x: torch.Tensor, block_size: int, ue8m0: bool, e8m0_scale: bool, config=None):
    """Launch on a contiguous x; returns (y e4m3 like x, s [..., K/bs] fp32 or float8_e8m0fnu).

    ``config = (elements per program, num_warps)`` overrides ``ACT_QUANT_CONFIG`` (tuning)."""
    n_groups = x.numel() // block_size
    y = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
    s_shape = (*x.shape[:-1], x.shape[-1] // block_size)
    if e8m0_scale:
        s = torch.empty(s_shape, dtype=torch.float8_e8m0fnu, device=x.device)
        s_arg = s.view(torch.uint8)
    else:
        s = s_arg = torch.empty(s_shape, dtype=torch.float32, device=x.device)
    bg, warps = _launch_shape(block_size, config)
    if n_groups:
        _act_quant_kernel[(triton.cdiv(n_groups, bg),)](
            x, y, s_arg, n_groups, BS=block_size, BLOCK_G=bg, UE8M0=ue8m0, S_E8M0=e8m0_scale, INPLACE=False,
            INTERPRET=interpret_mode(), num_warps=warps,
        )
    return y, s


def act_quant_inplace(x: torch.Tensor, block_size: int, ue8m0: bool) -> None:
    """Overwrite contiguous x with its FP8 quantize-dequantize round trip."""
    n_groups = x.numel() // block_size
    bg, warps = _launch_shape(block_size)
    if n_groups:
        _act_quant_kernel[(triton.cdiv(n_groups, bg),)](
            x, x, x, n_groups, BS=block_size, BLOCK_G=bg, UE8M0=ue8m0, S_E8M0=False, INPLACE=True, INTERPRET=interpret_mode(), num_warps=warps,
        )


def fp4_act_quant(x: torch.Tensor, block_size: int, e4m3_scale: bool, config=None):
    n_groups = x.numel() // block_size
    q = torch.empty((*x.shape[:-1], x.shape[-1] // 2), dtype=torch.uint8, device=x.device)
    s_shape = (*x.shape[:-1], x.shape[-1] // block_size)
    if e4m3_scale:
        s = s_arg = torch.empty(s_shape, dtype=torch.float8_e4m3fn, device=x.device)
    else:
        s = torch.empty(s_shape, dtype=torch.float8_e8m0fnu, device=x.device)
        s_arg = s.view(torch.uint8)
    bg, warps = _launch_shape(block_size, config)
    if n_groups:
        _fp4_act_quant_kernel[(triton.cdiv(n_groups, bg),)](
            x, q, s_arg, n_groups, BS=block_size, BLOCK_G=bg, E4M3_SCALE=e4m3_scale, INPLACE=False, INTERPRET=interpret_mode(), num_warps=warps,
        )
    return q, s


def fp4_act_quant_inplace(x: torch.Tensor, block_size: int, e4m3_scale: bool) -> None:
    n_groups = x.numel() // block_size
    bg, warps = _launch_shape(block_size)
    if n_groups:
        _fp4_act_quant_kernel[(triton.cdiv(n_groups, bg),)](
            x, x, x, n_groups, BS=block_size, BLOCK_G=bg, E4M3_SCALE=e4m3_scale, INPLACE=True, INTERPRET=interpret_mode(), num_warps=warps,
        )


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
