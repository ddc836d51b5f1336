"""Triton kernel for the hyper-connection split + Sinkhorn normalisation.

One program handles BLOCK_R (batch, seq) rows; each row's hc x hc matrix lives in registers as
a [BLOCK_R, HC_PAD, HC_PAD] block for all iterations, so the kernel reads ``mixes`` once and
writes pre / post / comb once.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from lowbit._backend import interpret_mode


@triton.jit
def _hc_split_sinkhorn_kernel(
    mixes_ptr, scale_ptr, base_ptr, pre_ptr, post_ptr, comb_ptr,
    R, S, stride_mb, stride_ms, stride_mk, eps,
    HC: tl.constexpr, HC_PAD: tl.constexpr, ITERS: tl.constexpr, BLOCK_R: tl.constexpr,
):
    i_r = tl.program_id(0).to(tl.int64)
    o_r = i_r * BLOCK_R + tl.arange(0, BLOCK_R)
    m_r = o_r < R
    # rows may be strided as [b, s]: address by (b, s), not by a flat row stride
    p_row = mixes_ptr + (o_r // S) * stride_mb + (o_r % S) * stride_ms
    o_i = tl.arange(0, HC_PAD)
    m_i = o_i < HC

    b_scale0 = tl.load(scale_ptr)
    b_scale1 = tl.load(scale_ptr + 1)
    b_scale2 = tl.load(scale_ptr + 2)

    # pre / post: [BLOCK_R, HC_PAD]
    m_rv = m_r[:, None] & m_i[None, :]
    x_pre = tl.load(p_row[:, None] + o_i[None, :] * stride_mk, mask=m_rv, other=0.0)
    x_post = tl.load(p_row[:, None] + (HC + o_i)[None, :] * stride_mk, mask=m_rv, other=0.0)
    base_pre = tl.load(base_ptr + o_i, mask=m_i, other=0.0)
    base_post = tl.load(base_ptr + HC + o_i, mask=m_i, other=0.0)
    pre = tl.sigmoid(x_pre * b_scale0 + base_pre[None, :]) + eps
    post = 2.0 * tl.sigmoid(x_post * b_scale1 + base_post[None, :])
    o_rv = o_r[:, None] * HC + o_i[None, :]
    tl.store(pre_ptr + o_rv, pre, mask=m_rv)
    tl.store(post_ptr + o_rv, post, mask=m_rv)

    # comb: [BLOCK_R, HC_PAD, HC_PAD], element (i, j) at 2*HC + i*HC + j
    o_ij = o_i[:, None] * HC + o_i[None, :]
    m_ij = m_i[:, None] & m_i[None, :]
    m_c = m_r[:, None, None] & m_ij[None, :, :]
    x = tl.load(p_row[:, None, None] + (2 * HC + o_ij)[None, :, :] * stride_mk, mask=m_c, other=0.0)
    base_c = tl.load(base_ptr + 2 * HC + o_ij, mask=m_ij, other=0.0)
    c = x * b_scale2 + base_c[None, :, :]
    # padded columns must not enter the row softmax; padded entries stay 0 afterwards
    c = tl.where(m_ij[None, :, :], c, -1.0e30)
    c = c - tl.max(c, 2)[:, :, None]
    c = tl.exp(c)
    c = c / tl.sum(c, 2)[:, :, None]
    c = tl.where(m_ij[None, :, :], c + eps, 0.0)
    c = c / (tl.sum(c, 1)[:, None, :] + eps)
    for _ in range(ITERS - 1):
        c = c / (tl.sum(c, 2)[:, :, None] + eps)
        c = c / (tl.sum(c, 1)[:, None, :] + eps)
    tl.store(comb_ptr + o_r[:, None, None] * (HC * HC) + o_ij[None, :, :], c, mask=m_c)


_LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def _rcp(x, FAST_RCP: tl.constexpr, INTERPRET: tl.constexpr):
    """1 / x in fp32.

    * default: Triton's fp32 ``/``, which is PTX ``div.full.f32`` (not IEEE ``div.rn``: max error
      2 ulp); ptxas expands each into ~8 instructions (|x| range tests, conditional rescaling by
      2^24 / 0.25, MUFU.RCP, multiply).
    * FAST_RCP: ``rcp.approx.ftz.f32``, one MUFU.RCP (max relative error 2^-23, i.e. about 1 ulp;
      subnormal x flushes to 0, giving inf). Safe here: every value this kernel inverts is >= eps
      (sums of entries >= 0 plus eps, exp2 sums whose largest term is 1, 1 + exp2(..) in the
      sigmoid), and the launcher takes FAST_RCP only for eps >= _FAST_RCP_MIN_EPS, so no input is
      subnormal. 1-2 ulp in a normaliser is ~1e-7 relative, 200x below the tests' 2e-5 absolute
      tolerance on values <= 1 + eps, and it does not accumulate over iterations: a row (column)
      scale error is divided out again by the next row (column) normalisation, so only the last
      steps' rounding reaches the output. The interpreter cannot run inline PTX: under INTERPRET
      this is plain ``1.0 / x`` (the cuda tier of tests/ops/test_hc_sinkhorn.py checks
      rcp.approx itself against the same tolerance).
    """
    if FAST_RCP and not INTERPRET:
        return tl.inline_asm_elementwise("rcp.approx.ftz.f32 $0, $1;", "=f,f", [x],
                                         dtype=tl.float32, is_pure=True, pack=1)
    else:
        return 1.0 / x


@triton.jit
def _sigmoid(x, FAST_RCP: tl.constexpr, INTERPRET: tl.constexpr):
    """tl.sigmoid, or 1 / (1 + 2^(-x log2 e)) with the fast reciprocal (x -> -inf: rcp(inf) = 0)."""
    if FAST_RCP:
        return _rcp(1.0 + tl.exp2(x * -_LOG2E), FAST_RCP, INTERPRET)
    else:
        return tl.sigmoid(x)


@triton.jit
def _norm4(a, b, c, d, eps, FAST_RCP: tl.constexpr, INTERPRET: tl.constexpr):
    """(a, b, c, d) / (a + b + c + d + eps): one reciprocal, four multiplies."""
    r = _rcp(a + b + c + d + eps, FAST_RCP, INTERPRET)
    return a * r, b * r, c * r, d * r


@triton.jit
def _rowsoftmax4(a, b, c, d, eps, FAST_RCP: tl.constexpr, INTERPRET: tl.constexpr):
    """softmax of 4 base-2 logits, + eps."""
    mx = tl.maximum(tl.maximum(a, b), tl.maximum(c, d))
    a = tl.exp2(a - mx)
    b = tl.exp2(b - mx)
    c = tl.exp2(c - mx)
    d = tl.exp2(d - mx)
    a, b, c, d = _norm4(a, b, c, d, 0.0, FAST_RCP, INTERPRET)
    return a + eps, b + eps, c + eps, d + eps


@triton.jit
def _ld(p_row, k, stride_mk, m_r):
    return tl.load(p_row + k * stride_mk, mask=m_r, other=0.0)


@triton.jit
def _comb_in(p_row, k, stride_mk, m_r, s2, base_ptr):
    """Base-2 logit of comb element k (0..15): (x * scale2 + base) * log2(e)."""
    return (_ld(p_row, 8 + k, stride_mk, m_r) * s2 + tl.load(base_ptr + 8 + k)) * _LOG2E


@triton.jit
def _comb_row(p_row, i, stride_mk, m_r, s2, base_ptr, BLOCK_R: tl.constexpr, VEC_LOAD: tl.constexpr):
    """Base-2 logits of comb row i: four [BLOCK_R] vectors.
    VEC_LOAD (rows contiguous, 96-byte row stride, so each comb row is 16-byte aligned): one
    [BLOCK_R, 4] load, a 16-byte vector per lane, split into its 4 columns in registers."""
    if VEC_LOAD:
        o4 = tl.arange(0, 4)
        x = tl.load(p_row[:, None] + (8 + 4 * i) + o4[None, :], mask=m_r[:, None], other=0.0)
        x = (x * s2 + tl.load(base_ptr + (8 + 4 * i) + o4)[None, :]) * _LOG2E
        # [BLOCK_R, 4] -> [BLOCK_R, 2, 2] (element 2p + q at [p, q]); split takes the last axis
        x02, x13 = tl.split(tl.reshape(x, [BLOCK_R, 2, 2]))
        a, c = tl.split(x02)
        b, d = tl.split(x13)
    else:
        a = _comb_in(p_row, 4 * i, stride_mk, m_r, s2, base_ptr)
        b = _comb_in(p_row, 4 * i + 1, stride_mk, m_r, s2, base_ptr)
        c = _comb_in(p_row, 4 * i + 2, stride_mk, m_r, s2, base_ptr)
        d = _comb_in(p_row, 4 * i + 3, stride_mk, m_r, s2, base_ptr)
    return a, b, c, d


@triton.jit
def _dot4(k0, k1, k2, k3, x0, x1, x2, x3, u, eps):
    """Scaled Sinkhorn half-step for one row (column): k . x + eps * u, as an FMA chain."""
    return tl.fma(k3, x3, tl.fma(k2, x2, tl.fma(k1, x1, tl.fma(k0, x0, eps * u))))


@triton.jit
def _rcp4(a, b, c, d, FAST_RCP: tl.constexpr, INTERPRET: tl.constexpr):
    return (_rcp(a, FAST_RCP, INTERPRET), _rcp(b, FAST_RCP, INTERPRET), _rcp(c, FAST_RCP, INTERPRET),
            _rcp(d, FAST_RCP, INTERPRET))


@triton.jit
def _sinkhorn4_scaled(k00, k01, k02, k03, k10, k11, k12, k13, k20, k21, k22, k23, k30, k31, k32, k33,
                      eps, ITERS: tl.constexpr, BLOCK_R: tl.constexpr, FAST_RCP: tl.constexpr,
                      INTERPRET: tl.constexpr):
    """The Sinkhorn steps on scaling vectors: c = diag(r) K diag(s) with K (softmax + eps) fixed.

    The reference's row step c / (rowsum(c) + eps) is r_i <- r_i / (r_i t_i + eps)
    = 1 / (t_i + eps u_i) with t_i = sum_j K_ij s_j and u_i = 1 / r_i: so u_i <- t_i + eps u_i
    (one multiply, four FMAs) and r_i = 1 / u_i; columns alike with v_j = 1 / s_j. Same eps
    semantics as the reference, another rounding order. A half-step costs 4 x (5 FMA/FMUL + 1
    reciprocal) instead of 4 x (4 adds + 1 reciprocal + 4 multiplies); c_ij = K_ij r_i s_j (32
    multiplies) is formed once at the end.
    Range: K_ij is in [eps, 1 + eps] and r_i s_j = c_ij / K_ij, so r, s, u, v stay within about
    [eps^2, 1 / eps^2]: normal fp32 for eps >= _SCALED_MIN_EPS, which the launcher checks."""
    # first column step, from r = 1
    v0 = k00 + k10 + k20 + k30 + eps
    v1 = k01 + k11 + k21 + k31 + eps
    v2 = k02 + k12 + k22 + k32 + eps
    v3 = k03 + k13 + k23 + k33 + eps
    s0, s1, s2, s3 = _rcp4(v0, v1, v2, v3, FAST_RCP, INTERPRET)
    one = tl.full([BLOCK_R], 1.0, tl.float32)
    u0, u1, u2, u3 = one, one, one, one
    r0, r1, r2, r3 = one, one, one, one
    for _ in tl.static_range(ITERS - 1):
        u0 = _dot4(k00, k01, k02, k03, s0, s1, s2, s3, u0, eps)
        u1 = _dot4(k10, k11, k12, k13, s0, s1, s2, s3, u1, eps)
        u2 = _dot4(k20, k21, k22, k23, s0, s1, s2, s3, u2, eps)
        u3 = _dot4(k30, k31, k32, k33, s0, s1, s2, s3, u3, eps)
        r0, r1, r2, r3 = _rcp4(u0, u1, u2, u3, FAST_RCP, INTERPRET)
        v0 = _dot4(k00, k10, k20, k30, r0, r1, r2, r3, v0, eps)
        v1 = _dot4(k01, k11, k21, k31, r0, r1, r2, r3, v1, eps)
        v2 = _dot4(k02, k12, k22, k32, r0, r1, r2, r3, v2, eps)
        v3 = _dot4(k03, k13, k23, k33, r0, r1, r2, r3, v3, eps)
        s0, s1, s2, s3 = _rcp4(v0, v1, v2, v3, FAST_RCP, INTERPRET)
    return (k00 * r0 * s0, k01 * r0 * s1, k02 * r0 * s2, k03 * r0 * s3,
            k10 * r1 * s0, k11 * r1 * s1, k12 * r1 * s2, k13 * r1 * s3,
            k20 * r2 * s0, k21 * r2 * s1, k22 * r2 * s2, k23 * r2 * s3,
            k30 * r3 * s0, k31 * r3 * s1, k32 * r3 * s2, k33 * r3 * s3)


@triton.jit
def _hc4_sinkhorn_kernel(
    mixes_ptr, scale_ptr, base_ptr, pre_ptr, post_ptr, comb_ptr,
    R, S, stride_mb, stride_ms, stride_mk, eps,
    ITERS: tl.constexpr, BLOCK_R: tl.constexpr, FAST_RCP: tl.constexpr, SCALED: tl.constexpr,
    ROW_ADDR: tl.constexpr, VEC_LOAD: tl.constexpr, INTERPRET: tl.constexpr,
):
    """hc = 4, one row per lane: each of the 16 matrix entries is its own [BLOCK_R] vector, so
    a lane holds whole matrices and every row/column sum is plain in-thread arithmetic (no
    cross-lane reduction, no layout conversion through shared memory). Every input is read once
    and every output written once; the iterations touch only registers.

    The launcher picks the forms by eps and by the layout of ``mixes`` (:func:`hc4_launch`);
    comb leaves as one [BLOCK_R, 16] tile (tl.join) for 16-byte vector stores.
    FAST_RCP: every reciprocal (normalisers, softmax, sigmoid) one rcp.approx (see _rcp).
    SCALED: Sinkhorn on scaling vectors (see _sinkhorn4_scaled).
    ROW_ADDR: 0 = row r at (r // S) * stride_mb + (r % S) * stride_ms (64-bit division);
      1 = row r at r * stride_ms (the launcher passes the flat row stride);
      2 = contiguous rows: r * 24, element stride 1 (compile-time, so alignment is known).
    VEC_LOAD (ROW_ADDR == 2 only): pre / post / comb rows read as [BLOCK_R, 4] tiles, one 16-byte
      load per lane each, instead of 24 scalar loads.
    """
    i_r = tl.program_id(0).to(tl.int64)
    o_r = i_r * BLOCK_R + tl.arange(0, BLOCK_R)
    m_r = o_r < R
    if ROW_ADDR == 2:
        p_row = mixes_ptr + o_r * 24
    elif ROW_ADDR == 1:
        p_row = mixes_ptr + o_r * stride_ms
    else:
        p_row = mixes_ptr + (o_r // S) * stride_mb + (o_r % S) * stride_ms
    s0 = tl.load(scale_ptr)
    s1 = tl.load(scale_ptr + 1)
    s2 = tl.load(scale_ptr + 2)
    if VEC_LOAD:
        o4 = tl.arange(0, 4)
        x = tl.load(p_row[:, None] + o4[None, :], mask=m_r[:, None], other=0.0)
        pre = _sigmoid(x * s0 + tl.load(base_ptr + o4)[None, :], FAST_RCP, INTERPRET) + eps
        tl.store(pre_ptr + o_r[:, None] * 4 + o4[None, :], pre, mask=m_r[:, None])
        x = tl.load(p_row[:, None] + 4 + o4[None, :], mask=m_r[:, None], other=0.0)
        post = 2.0 * _sigmoid(x * s1 + tl.load(base_ptr + 4 + o4)[None, :], FAST_RCP, INTERPRET)
        tl.store(post_ptr + o_r[:, None] * 4 + o4[None, :], post, mask=m_r[:, None])
    else:
        for j in tl.static_range(4):
            pre = _sigmoid(_ld(p_row, j, stride_mk, m_r) * s0 + tl.load(base_ptr + j), FAST_RCP, INTERPRET) + eps
            tl.store(pre_ptr + o_r * 4 + j, pre, mask=m_r)
            post = 2.0 * _sigmoid(_ld(p_row, 4 + j, stride_mk, m_r) * s1 + tl.load(base_ptr + 4 + j), FAST_RCP, INTERPRET)
            tl.store(post_ptr + o_r * 4 + j, post, mask=m_r)

    # c_ij = comb[i, j]; row softmax + eps
    a, b, c, d = _comb_row(p_row, 0, stride_mk, m_r, s2, base_ptr, BLOCK_R, VEC_LOAD)
    c00, c01, c02, c03 = _rowsoftmax4(a, b, c, d, eps, FAST_RCP, INTERPRET)
    a, b, c, d = _comb_row(p_row, 1, stride_mk, m_r, s2, base_ptr, BLOCK_R, VEC_LOAD)
    c10, c11, c12, c13 = _rowsoftmax4(a, b, c, d, eps, FAST_RCP, INTERPRET)
    a, b, c, d = _comb_row(p_row, 2, stride_mk, m_r, s2, base_ptr, BLOCK_R, VEC_LOAD)
    c20, c21, c22, c23 = _rowsoftmax4(a, b, c, d, eps, FAST_RCP, INTERPRET)
    a, b, c, d = _comb_row(p_row, 3, stride_mk, m_r, s2, base_ptr, BLOCK_R, VEC_LOAD)
    c30, c31, c32, c33 = _rowsoftmax4(a, b, c, d, eps, FAST_RCP, INTERPRET)
    if SCALED:
        (c00, c01, c02, c03, c10, c11, c12, c13,
         c20, c21, c22, c23, c30, c31, c32, c33) = _sinkhorn4_scaled(
            c00, c01, c02, c03, c10, c11, c12, c13, c20, c21, c22, c23, c30, c31, c32, c33,
            eps, ITERS, BLOCK_R, FAST_RCP, INTERPRET)
    else:
        c00, c10, c20, c30 = _norm4(c00, c10, c20, c30, eps, FAST_RCP, INTERPRET)
        c01, c11, c21, c31 = _norm4(c01, c11, c21, c31, eps, FAST_RCP, INTERPRET)
        c02, c12, c22, c32 = _norm4(c02, c12, c22, c32, eps, FAST_RCP, INTERPRET)
        c03, c13, c23, c33 = _norm4(c03, c13, c23, c33, eps, FAST_RCP, INTERPRET)
        for _ in tl.static_range(ITERS - 1):
            c00, c01, c02, c03 = _norm4(c00, c01, c02, c03, eps, FAST_RCP, INTERPRET)
            c10, c11, c12, c13 = _norm4(c10, c11, c12, c13, eps, FAST_RCP, INTERPRET)
            c20, c21, c22, c23 = _norm4(c20, c21, c22, c23, eps, FAST_RCP, INTERPRET)
            c30, c31, c32, c33 = _norm4(c30, c31, c32, c33, eps, FAST_RCP, INTERPRET)
            c00, c10, c20, c30 = _norm4(c00, c10, c20, c30, eps, FAST_RCP, INTERPRET)
            c01, c11, c21, c31 = _norm4(c01, c11, c21, c31, eps, FAST_RCP, INTERPRET)
            c02, c12, c22, c32 = _norm4(c02, c12, c22, c32, eps, FAST_RCP, INTERPRET)
            c03, c13, c23, c33 = _norm4(c03, c13, c23, c33, eps, FAST_RCP, INTERPRET)

    p_c = comb_ptr + o_r * 16
    # tl.join(a, b) interleaves along a new last axis, so the flat order is built from the
    # bit-reversed leaves: the [BLOCK_R, 2, 2, 2, 2] result reshapes to row-major 16.
    t = tl.join(tl.join(tl.join(tl.join(c00, c20), tl.join(c10, c30)),
                        tl.join(tl.join(c02, c22), tl.join(c12, c32))),
                tl.join(tl.join(tl.join(c01, c21), tl.join(c11, c31)),
                        tl.join(tl.join(c03, c23), tl.join(c13, c33))))
    t = tl.reshape(t, [BLOCK_R, 16])
    o_k = tl.arange(0, 16)
    tl.store(p_c[:, None] + o_k[None, :], t, mask=m_r[:, None])


# hc = 4 launch config (BLOCK_R rows a program, num_warps), from ``lowbit tune hc_sinkhorn`` on
# the H200 (16384 rows x 20 iterations, CUDA-graph replay): 3.07 us at 32 rows / 1 warp a program,
# with the fast reciprocal, the scaling-vector form, flat row addressing and 16-byte loads
# (docs/sparse_attn.md).
HC4_CONFIG = dict(BLOCK_R=32, num_warps=1)
_CONFIG_KEYS = {"BLOCK_R", "num_warps", "num_stages"}

# SCALED keeps r, s, u, v normal in fp32 down to this eps.
_SCALED_MIN_EPS = 1e-8
# FAST_RCP's flush of subnormal inputs cannot trigger when every inverted value is >= eps >= this
# (a normal fp32); for eps = 0 a sum of underflowed entries would become inf instead of 1 / x.
_FAST_RCP_MIN_EPS = 2.0**-126


def hc4_launch(config: dict | None, mixes: torch.Tensor, eps: float) -> tuple[int, dict, tuple[int, int, int]]:
    """Resolve an hc = 4 config (``BLOCK_R``, ``num_warps``, optionally ``num_stages``; None:
    :data:`HC4_CONFIG`) against ``mixes [b, s, 24]``: (BLOCK_R, kernel keyword arguments (constexprs
    and num_warps / num_stages), (stride_mb, stride_ms, stride_mk) to pass). The fast reciprocal
    and the scaling-vector form run where eps allows them, flat row addressing and 16-byte loads
    where the layout does."""
    cfg = {**HC4_CONFIG, **(config or {})}
    unknown = set(cfg) - _CONFIG_KEYS
    if unknown:
        raise ValueError(f"unknown hc=4 config keys {sorted(unknown)}; known: {sorted(_CONFIG_KEYS)}")
    b, s, _ = mixes.shape
    sb, ss, sk = mixes.stride()
    strides = (sb, ss, sk)
    row_addr = 0
    # rows r = i * s + j sit at one stride when b == 1, s == 1 or the batch stride is s rows
    row = ss if (b == 1 or sb == s * ss) else sb if s == 1 else None
    if row is not None:
        row_addr = 2 if (row == 24 and sk == 1) else 1
        strides = (sb, row, sk)
    block_r = cfg.pop("BLOCK_R")
    kwargs = dict(FAST_RCP=eps >= _FAST_RCP_MIN_EPS, SCALED=eps >= _SCALED_MIN_EPS, ROW_ADDR=row_addr,
                  VEC_LOAD=row_addr == 2, INTERPRET=interpret_mode(), **cfg)
    return block_r, kwargs, strides


def _block_r(hc_pad: int) -> int:
    # 32 matrices of 4x4 per program at hc = 4: 512 fp32 values, 4 per thread at 4 warps.
    return max(1, 512 // (hc_pad * hc_pad))


def hc_split_sinkhorn_triton(
    mixes: torch.Tensor,
    hc_scale: torch.Tensor,
    hc_base: torch.Tensor,
    hc_mult: int,
    sinkhorn_iters: int,
    eps: float,
    config: dict | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Launch the kernel (inputs already validated). hc = 4 takes the one-row-per-lane kernel
    (``config`` overrides HC4_CONFIG, for tuning); other hc the generic block kernel."""
    b, s, _ = mixes.shape
    hc = hc_mult
    pre = torch.empty(b, s, hc, dtype=torch.float32, device=mixes.device)
    post = torch.empty(b, s, hc, dtype=torch.float32, device=mixes.device)
    comb = torch.empty(b, s, hc, hc, dtype=torch.float32, device=mixes.device)
    rows = b * s
    if rows == 0:
        return pre, post, comb
    if hc == 4:
        block_r, kwargs, strides = hc4_launch(config, mixes, float(eps))
        _hc4_sinkhorn_kernel[(triton.cdiv(rows, block_r),)](
            mixes, hc_scale.contiguous(), hc_base.contiguous(), pre, post, comb,
            rows, s, *strides, float(eps), ITERS=sinkhorn_iters, BLOCK_R=block_r, **kwargs,
        )
        return pre, post, comb
    hc_pad = triton.next_power_of_2(hc)
    block_r = _block_r(hc_pad)
    _hc_split_sinkhorn_kernel[(triton.cdiv(rows, block_r),)](
        mixes, hc_scale.contiguous(), hc_base.contiguous(), pre, post, comb,
        rows, s, *mixes.stride(), float(eps),
        HC=hc, HC_PAD=hc_pad, ITERS=sinkhorn_iters, BLOCK_R=block_r, num_warps=4,
    )
    return pre, post, comb
