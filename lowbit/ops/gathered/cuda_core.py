"""The CUDA-core kernels of the gathered projection, every format: gather rows -> decode -> scale ->
dot -> scatter (``gathered_dot`` / ``gathered_bias``), and the decoded rows (``gathered_rows``).

One kernel family, the weight format a compile-time specialization (``FORMAT``, codes from
:mod:`lowbit.ops.gathered.reference`). A row is walked in *units*: elements for dense / FP8,
bytes for the packed formats (a byte holds 2 E2M1 codes, or ``8/BITS`` INTx codes, one per
plane). Each K tile is a ``[BT, NG, GBP]`` block: ``BT`` gathered rows x ``NG`` scale groups x
``GB`` units of one group (padded to the power of two ``GBP``), so a group's partial dot is one
``sum(axis=2)`` and its scale multiplies the fp32 partial sum, never the weight tile.

Inputs are tensors of any strides (a row-slice or ``W[::2]`` of a table works without a copy);
E4M3 tensors arrive as uint8 views and are decoded here (the bit formulas match the spec, NaN
included, on the GPU and in the interpreter alike).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from lowbit._backend import interpret_mode
from lowbit.ops.gathered.decode import cast_rne, e2m1, e2m1_f16, e4m3, fp8_data, ue8m0
from lowbit.ops.gathered.reference import DENSE, FP8_ROW, INTX, MXFP4_CODE, NVFP4_CODE

__all__ = ["DOT_CONFIGS", "ROWS_CONFIG", "dot_config", "launch_dot", "launch_rows"]


@triton.jit
def _dot_tile(
    acc, u0, p_xb, p_wr, p_s, p_a, rows, m_r, o_g, o_u, m_e, K, U,
    s_xk, s_wu, s_sn, s_sg, s_an, s_ag,
    FORMAT: tl.constexpr, BITS: tl.constexpr, GB: tl.constexpr,
):
    """acc[BT, NG] += the partial dots of the K tile starting at unit u0. E2M1 codes decode by
    :func:`e2m1_f16` (five integer ops and a convert; the partial dots are then 2^-14 times too
    small and the caller multiplies the final dot by 2^14, exactly)."""
    u = u0 + o_u  # [NG, GBP]
    m_u = (u < U) & m_e
    m_w = m_r[:, None, None] & m_u[None, :, :]
    # [BT, NG, GBP]
    b_w = tl.load(p_wr + u[None, :, :] * s_wu, mask=m_w, other=0)
    if FORMAT == 0 or FORMAT == 1:  # DENSE, FP8_ROW: units are elements
        # [NG, GBP]
        b_x = tl.load(p_xb + u * s_xk, mask=m_u, other=0).to(tl.float32)
        if FORMAT == 0:
            w = b_w.to(tl.float32)
        else:
            w = fp8_data(b_w)
        acc += tl.sum(w * b_x[None, :, :], axis=2)
    elif FORMAT == 2 or FORMAT == 3:  # NVFP4, MXFP4: byte u holds elements 2u (low), 2u+1 (high)
        c = b_w.to(tl.int32)
        b_xe = tl.load(p_xb + (2 * u) * s_xk, mask=m_u, other=0).to(tl.float32)
        b_xo = tl.load(p_xb + (2 * u + 1) * s_xk, mask=m_u, other=0).to(tl.float32)
        part = tl.sum(e2m1_f16(c & 15) * b_xe[None, :, :] + e2m1_f16(c >> 4) * b_xo[None, :, :], axis=2)
        g = u0 // GB + o_g
        m_g = m_r[:, None] & (g < U // GB)[None, :]
        # [BT, NG]
        b_s = tl.load(p_s + rows[:, None] * s_sn + g[None, :] * s_sg, mask=m_g, other=0).to(tl.int32)
        if FORMAT == 2:
            sc = e4m3(b_s)
        else:
            sc = ue8m0(b_s)
        acc += part * sc
    else:  # INTX, plane-split: byte u holds the code of element i*U + u in bits [i*BITS, (i+1)*BITS)
        c = b_w.to(tl.int32)
        for i in tl.static_range(8 // BITS):
            q = ((c >> (i * BITS)) & ((1 << BITS) - 1)).to(tl.float32)
            k = i * U + u
            m_k = m_u & (k < K)  # x has the logical K; the padded codes meet x = 0
            b_x = tl.load(p_xb + k * s_xk, mask=m_k, other=0).to(tl.float32)
            part = tl.sum(q * b_x[None, :, :], axis=2)
            xsum = tl.sum(b_x, axis=1)
            g = (i * U + u0) // GB + o_g
            m_g = m_r[:, None] & (g < (8 // BITS) * (U // GB))[None, :]
            b_sc = tl.load(p_s + rows[:, None] * s_sn + g[None, :] * s_sg, mask=m_g, other=0).to(tl.float32)
            b_z = tl.load(p_a + rows[:, None] * s_an + g[None, :] * s_ag, mask=m_g, other=0).to(tl.float32)
            # dot(x, (q - z) * s) = s * (dot(x, q) - z * sum(x)) per group
            acc += b_sc * (part - b_z * xsum[None, :])
    return acc


@triton.jit(do_not_specialize=["T", "V", "K", "U"])
def _gathered_dot_kernel(
    p_x, p_w, p_s, p_a, p_idx, p_val, p_out,
    T, V, K, U, alpha,
    s_xb, s_xk, s_wn, s_wu, s_sn, s_sg, s_an, s_ag,
    s_ib, s_it, s_vb, s_vt, s_ob, s_ot,
    FORMAT: tl.constexpr, BITS: tl.constexpr, GB: tl.constexpr, GBP: tl.constexpr,
    NG: tl.constexpr, BT: tl.constexpr, BIAS: tl.constexpr, INTERPRET: tl.constexpr,
):
    """One program per (b, block of BT indices). BIAS: scatter values + alpha*dot into logits
    (p_out) at the indices; else store the dots to out[b, t]."""
    i_b = tl.program_id(0).to(tl.int64)
    i_t = tl.program_id(1)
    o_t = i_t * BT + tl.arange(0, BT)
    m_t = o_t < T
    # [BT]
    b_idx = tl.load(p_idx + i_b * s_ib + o_t * s_it, mask=m_t, other=0).to(tl.int64)
    m_r = m_t & (b_idx >= 0) & (b_idx < V)  # an out-of-range index reads nothing
    rows = tl.where(m_r, b_idx, 0)

    o_g = tl.arange(0, NG)
    o_e = tl.arange(0, GBP)
    o_u = o_g[:, None] * GB + o_e[None, :]  # [NG, GBP] unit offsets within a tile
    m_e = (o_e < GB)[None, :]
    p_xb = p_x + i_b * s_xb
    p_wr = p_w + rows[:, None, None] * s_wn  # [BT, 1, 1]
    acc = tl.zeros([BT, NG], dtype=tl.float32)
    # The interpreter (Triton 3.6 with NumPy 2.4) cannot run `range` over a runtime bound, so it
    # gets the equivalent while loop; the GPU keeps the for loop, which Triton can pipeline.
    if INTERPRET:
        u0 = 0
        while u0 < U:
            acc = _dot_tile(acc, u0, p_xb, p_wr, p_s, p_a, rows, m_r, o_g, o_u, m_e, K, U,
                            s_xk, s_wu, s_sn, s_sg, s_an, s_ag, FORMAT, BITS, GB)
            u0 += NG * GB
    else:
        for u0 in range(0, U, NG * GB):
            acc = _dot_tile(acc, u0, p_xb, p_wr, p_s, p_a, rows, m_r, o_g, o_u, m_e, K, U,
                            s_xk, s_wu, s_sn, s_sg, s_an, s_ag, FORMAT, BITS, GB)
    dot = tl.sum(acc, axis=1)  # [BT]
    if FORMAT == 2 or FORMAT == 3:
        dot = dot * 16384.0  # undo e2m1_f16's 2^-14 (exact)
    if FORMAT == 1:
        dot = dot * tl.load(p_s + rows * s_sn, mask=m_r, other=0)
    if FORMAT == 2:
        dot = dot * tl.load(p_a)
    if BIAS:
        b_v = tl.load(p_val + i_b * s_vb + o_t * s_vt, mask=m_t, other=0).to(tl.float32)
        res = b_v + alpha * dot
        tl.store(p_out + i_b * s_ob + rows * s_ot, cast_rne(res, p_out.dtype.element_ty, INTERPRET), mask=m_r)
    else:
        tl.store(p_out + i_b * s_ob + o_t * s_ot, tl.where(m_r, dot, float("nan")), mask=m_t)


@triton.jit
def _gathered_rows_kernel(
    p_w, p_s, p_a, p_idx, p_out,
    M, V, K, U,
    s_wn, s_wu, s_sn, s_sg, s_an, s_ag, s_om,
    FORMAT: tl.constexpr, BITS: tl.constexpr, GB: tl.constexpr, GBP: tl.constexpr,
    NG: tl.constexpr, BM: tl.constexpr, INTERPRET: tl.constexpr,
):
    """One program per (block of BM indices, tile of NG*GB units): decode and store W[idx] rows.
    The decode order matches the reference bit for bit (e.g. NVFP4 ``e2m1 * (scale * global)``)."""
    i_m = tl.program_id(0)
    i_u = tl.program_id(1)
    o_m = i_m * BM + tl.arange(0, BM)
    m_m = o_m < M
    # [BM]
    b_idx = tl.load(p_idx + o_m, mask=m_m, other=0).to(tl.int64)
    m_r = m_m & (b_idx >= 0) & (b_idx < V)
    rows = tl.where(m_r, b_idx, 0)
    o_g = tl.arange(0, NG)
    o_e = tl.arange(0, GBP)
    u0 = i_u * (NG * GB)
    u = u0 + o_g[:, None] * GB + o_e[None, :]  # [NG, GBP]
    m_u = (u < U) & (o_e < GB)[None, :]
    m_w = m_r[:, None, None] & m_u[None, :, :]
    m_o = m_m[:, None, None] & m_u[None, :, :]
    bad = (~m_r)[:, None, None]  # out-of-range index: a NaN row
    # [BM, NG, GBP]
    b_w = tl.load(p_w + rows[:, None, None] * s_wn + u[None, :, :] * s_wu, mask=m_w, other=0)
    p_o = p_out + o_m.to(tl.int64)[:, None, None] * s_om
    ty = p_out.dtype.element_ty
    if FORMAT == 0 or FORMAT == 1:
        if FORMAT == 0:
            w = b_w.to(tl.float32)
        else:
            w = fp8_data(b_w) * tl.load(p_s + rows * s_sn, mask=m_r, other=0)[:, None, None]
        w = tl.where(bad, float("nan"), w)
        tl.store(p_o + u[None, :, :], cast_rne(w, ty, INTERPRET), mask=m_o)
    elif FORMAT == 2 or FORMAT == 3:
        c = b_w.to(tl.int32)
        g = u0 // GB + o_g
        m_g = m_r[:, None] & (g < U // GB)[None, :]
        b_s = tl.load(p_s + rows[:, None] * s_sn + g[None, :] * s_sg, mask=m_g, other=0).to(tl.int32)
        if FORMAT == 2:
            sc = e4m3(b_s) * tl.load(p_a)
        else:
            sc = ue8m0(b_s)
        sc = sc[:, :, None]  # [BM, NG, 1]
        lo = tl.where(bad, float("nan"), e2m1(c & 15) * sc)
        hi = tl.where(bad, float("nan"), e2m1(c >> 4) * sc)
        tl.store(p_o + (2 * u)[None, :, :], cast_rne(lo, ty, INTERPRET), mask=m_o)
        tl.store(p_o + (2 * u + 1)[None, :, :], cast_rne(hi, ty, INTERPRET), mask=m_o)
    else:
        c = b_w.to(tl.int32)
        for i in tl.static_range(8 // BITS):
            q = ((c >> (i * BITS)) & ((1 << BITS) - 1)).to(tl.float32)
            g = (i * U + u0) // GB + o_g
            m_g = m_r[:, None] & (g < (8 // BITS) * (U // GB))[None, :]
            b_sc = tl.load(p_s + rows[:, None] * s_sn + g[None, :] * s_sg, mask=m_g, other=0).to(tl.float32)
            b_z = tl.load(p_a + rows[:, None] * s_an + g[None, :] * s_ag, mask=m_g, other=0).to(tl.float32)
            w = tl.where(bad, float("nan"), (q - b_z[:, :, None]) * b_sc[:, :, None])
            k = i * U + u
            tl.store(p_o + k[None, :, :], cast_rne(w, ty, INTERPRET), mask=m_o & (k < K)[None, :, :])


# Launch configs of the dot kernel, keyed by B*T: (max B*T, dict(BT, TILE, num_warps, num_stages)).
# A program's tile is BT rows (of one batch row, sharing x) x TILE units (bytes for the packed
# formats). Set by ``lowbit tune gathered`` on the H200 (NVFP4, V = 131072, CUDA-graph replay;
# docs/gathered.md): BT = 4 rows at 4 warps won everywhere past a handful of rows; taller tiles
# (8-16 rows) spill or starve the grid, BT 1-2 leave x reuse and bytes in flight on the table.
DOT_CONFIGS = (
    (256, dict(BT=2, TILE=1024, num_warps=4, num_stages=2)),
    (4096, dict(BT=4, TILE=1024, num_warps=4, num_stages=2)),
    (1 << 62, dict(BT=4, TILE=512, num_warps=4, num_stages=2)),
)
# gathered_rows: (BM rows, TILE units, num_warps); it is a pure gather + decode + store.
ROWS_CONFIG = (4, 256, 4)


def _next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def _units(fmt: int, data: torch.Tensor, k: int, bits: int, group_size: int):
    """(U units per row, GB units per scale group, GBP = next pow2 of GB) for a format."""
    if fmt in (DENSE, FP8_ROW):
        return k, None, None
    if fmt == NVFP4_CODE:
        return data.shape[1], 8, 8
    if fmt == MXFP4_CODE:
        return data.shape[1], 16, 16
    if fmt == INTX:
        return data.shape[1], group_size, _next_pow2(group_size)
    raise ValueError(f"unknown gathered format code {fmt}")


def _tile(fmt, u, gb, gbp, tile_units):
    """(GB, GBP, NG) for a tile of about ``tile_units`` units, never wider than the row needs."""
    if gb is None:  # dense / FP8: no scale groups inside a row; one "group" spans the tile
        t = min(tile_units, _next_pow2(max(u, 1)))
        return t, t, 1
    ng = max(1, min(tile_units // gbp, _next_pow2(-(-max(u, 1) // gb))))
    return gb, gbp, ng


def _strides2(t):
    if t is None:
        return 0, 0
    if t.dim() == 0:
        return 0, 0
    return t.stride(0), t.stride(1)


def dot_config(b: int, t: int) -> dict:
    """The launch config of the table row for B*T = b*t."""
    return next(c for n, c in DOT_CONFIGS if b * t <= n)


def launch_dot(x, fmt, data, scale, aux, index, k, bits, group_size, out, values, alpha, bias, config: dict) -> None:
    """Run the dot kernel with ``config`` (a :data:`DOT_CONFIGS` dict): ``out`` fp32 [B, T] dots, or
    (``bias``) the logits that receive ``values + alpha * dot`` at the indices."""
    b, t = index.shape
    if b == 0 or t == 0:
        return
    u, gb, gbp = _units(fmt, data, k, bits, group_size)
    cfg = config
    bt, tile_units, warps = cfg["BT"], cfg["TILE"], cfg["num_warps"]
    bt = min(bt, _next_pow2(t))
    gb, gbp, ng = _tile(fmt, u, gb, gbp, tile_units)
    s_sn, s_sg = _strides2(scale)
    s_an, s_ag = _strides2(aux) if fmt == INTX else (0, 0)
    # unused pointers get a valid tensor so the signature (and its specialization) stays fixed
    p_s = scale if scale is not None else data
    p_a = aux if aux is not None else data
    p_val = values if bias else out
    s_vb, s_vt = (values.stride(0), values.stride(1)) if bias else (0, 0)
    grid = (b, triton.cdiv(t, bt))
    _gathered_dot_kernel[grid](
        x, data, p_s, p_a, index, p_val, out,
        t, data.shape[0], k, u, float(alpha),
        x.stride(0), x.stride(1), data.stride(0), data.stride(1), s_sn, s_sg, s_an, s_ag,
        index.stride(0), index.stride(1), s_vb, s_vt, out.stride(0), out.stride(1),
        FORMAT=fmt, BITS=bits if fmt == INTX else 4, GB=gb, GBP=gbp, NG=ng, BT=bt, BIAS=bias,
        INTERPRET=interpret_mode(), num_warps=warps, num_stages=cfg.get("num_stages", 2),
    )


def launch_rows(fmt, data, scale, aux, index, k, bits, group_size, dtype) -> torch.Tensor:
    """Run the rows kernel: ``[*index.shape, K]`` decoded rows in ``dtype``."""
    out = torch.empty((*index.shape, k), dtype=dtype, device=data.device)
    flat = index.reshape(-1)
    if not flat.is_contiguous():
        flat = flat.contiguous()
    m = flat.numel()
    if m == 0 or k == 0:
        return out
    u, gb, gbp = _units(fmt, data, k, bits, group_size)
    bm, tile_units, warps = ROWS_CONFIG
    if interpret_mode():
        bm = min(16, _next_pow2(m))
    gb, gbp, ng = _tile(fmt, u, gb, gbp, tile_units)
    s_sn, s_sg = _strides2(scale)
    s_an, s_ag = _strides2(aux) if fmt == INTX else (0, 0)
    grid = (triton.cdiv(m, bm), triton.cdiv(u, ng * gb))
    _gathered_rows_kernel[grid](
        data, scale if scale is not None else data, aux if aux is not None else data, flat, out,
        m, data.shape[0], k, u,
        data.stride(0), data.stride(1), s_sn, s_sg, s_an, s_ag, k,
        FORMAT=fmt, BITS=bits if fmt == INTX else 4, GB=gb, GBP=gbp, NG=ng, BM=bm,
        INTERPRET=interpret_mode(), num_warps=warps,
    )
    return out
