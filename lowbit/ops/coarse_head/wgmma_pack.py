"""The weights' layouts of the int8-wgmma coarse pass (``wgmma_int8.py``), in plain torch: the
per-group pass's scales and zero points in one stage-major buffer (:func:`wgmma_sz`), the
whole-row variant's group codes and row units (:func:`wgmma_table`), and that variant's logits
from exactly its operands (:func:`table_reference`). Built once per head (``DraftHead``'s
packing); no Triton import, so the CPU tiers test them directly."""
from __future__ import annotations

import torch

__all__ = ["STAGE_BYTES", "TABLE_BITS", "table_codes", "table_coefficients", "table_reference", "wgmma_sz",
           "wgmma_sz_bytes", "wgmma_sz_views", "wgmma_table"]

STAGE_BYTES = 64  # packed bytes of a row per pipeline stage: one 64-wide K run of every plane


def wgmma_sz_bytes(n: int, bits: int, ell: int) -> int:
    """Bytes of :func:`wgmma_sz`'s buffer for ``n`` token rows: ``(2 P + 1) NS NP``."""
    return (2 * (8 // bits) + 1) * (ell // STAGE_BYTES) * (-(-n // 16) * 16)


def wgmma_sz(scale: torch.Tensor, zero: torch.Tensor, bits: int, group_size: int, ell: int) -> torch.Tensor:
    """The per-group pass's scales and zero points, stage-major, in one uint8 buffer of
    ``(2 P + 1) NS NP`` bytes (P = 8 / bits planes, NS = ``ell`` / 64 stages, NP = N rounded up to
    a multiple of 16 for TMA's 16-byte row pitch): first the fp16 scales [P NS, NP] -- row ``P s +
    j``, column n: the scale of the group that plane j's stage s of row n lies in -- then the zero
    points [NS, NP] uint8, byte (s, n) holding the P planes' zeros of stage s, plane j's in bits
    ``bits j .. bits (j + 1) - 1`` (P ``bits``-bit zeros fill a byte exactly). Views:
    :func:`wgmma_sz_views`. A stage's share for a block of rows is two TMA boxes, [P, rows] fp16 and
    a 128-byte box of zero bytes: 2 P + 1 bytes a row and stage (INT4 5, INT2 9), against 3 P of the
    format's (fp16, uint8) pairs. ``scale`` fp16 / ``zero`` uint8 [N, NG], ``ell`` the plane length (a
    multiple of ``group_size``, itself a multiple of 64)."""
    n = scale.shape[0]
    p = 8 // bits
    ns = ell // STAGE_BYTES
    buf = torch.zeros(wgmma_sz_bytes(n, bits, ell), dtype=torch.uint8, device=scale.device)
    scales, zeros = wgmma_sz_views(buf, bits, ell)
    np_ = zeros.shape[1]
    s_idx = torch.arange(ns, device=scale.device)
    zb = torch.zeros(ns, n, dtype=torch.int32, device=scale.device)
    for j in range(p):
        g = (j * ell + STAGE_BYTES * s_idx) // group_size  # [NS]
        scales.view(ns, p, np_)[:, j, :n] = scale[:, g].t()
        zb |= zero[:, g].t().to(torch.int32) << (bits * j)
    zeros[:, :n] = zb.to(torch.uint8)
    return buf


def wgmma_sz_views(sz: torch.Tensor, bits: int, ell: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The two parts of :func:`wgmma_sz`'s buffer as views: fp16 scales [P NS, NP] and uint8 zero
    bytes [NS, NP]."""
    p, ns = 8 // bits, ell // STAGE_BYTES
    np_ = sz.numel() // ((2 * p + 1) * ns)
    cut = 2 * p * ns * np_
    return sz[:cut].view(torch.float16).view(p * ns, np_), sz[cut:].view(ns, np_)


#: INTx widths the whole-row integer variant serves: INT2's ``|q - z| <= 3`` leaves A up to 42
#: (scales to within 1.2% of the row's largest); INT4's 15 would leave 8 (6%)
TABLE_BITS = (2,)


def table_coefficients(scale: torch.Tensor, zero: torch.Tensor, bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(A int32 [N, NG], r fp32 [N]) of the whole-row variant: ``r_n = max_g s_g e_g / 127`` with
    ``e_g = max(z_g, qmax - z_g)`` (the largest ``|q - z_g|``), ``A_g = round(s_g / r_n)`` capped at
    ``127 / e_g``, so every ``A_g (q - z_g)`` is an int8. An all-zero row (every ``s_g e_g = 0``)
    gets ``r = 1``, ``A = 0``."""
    qmax = (1 << bits) - 1
    s = scale.float()
    z = zero.float()
    e = torch.maximum(z, qmax - z)
    r = (s * e).amax(dim=1) / 127.0
    r = torch.where(r > 0, r, torch.ones_like(r))
    a = torch.minimum(torch.round(s / r[:, None]), torch.floor(127.0 / e.clamp_min(1.0))).clamp_min(0.0)
    return a.to(torch.int32), r.contiguous()


def table_codes(a: torch.Tensor, zero: torch.Tensor) -> torch.Tensor:
    """int32 [N, NG]: the 16-bit group code of the whole-row variant, ``A | (128 - A z) << 8``
    (``A`` from :func:`table_coefficients`, ``z`` the zero point). Byte c of the group's weight
    table is then ``(c A + (128 - A z)) ^ 0x80 = A (c - z)`` as int8: every ``c A + 128 - A z`` lies
    in [1, 255] (``|A (c - z)| <= 127``), so the four bytes of ``A * 0x03020100 + (128 - A z) *
    0x01010101`` are computed without a carry between them (``_TABLE_ASM``: 4 ops a table)."""
    return a | ((128 - a * zero.to(torch.int32)) << 8)


def wgmma_table(scale: torch.Tensor, zero: torch.Tensor, bits: int, group_size: int,
                ell: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The whole-row variant's words and row units: (int32 [2 NS, NP], fp32 [N]), NS = ``ell`` / 64
    stages, NP = N rounded up to a multiple of 4 (TMA's 16-byte row pitch). Stage-major: word
    ``(2 s + h, n)`` holds in its low / high 16 bits the :func:`table_codes` of the groups that
    planes ``2 h`` / ``2 h + 1`` of row n's stage s lie in -- 2 bytes a group (the codes are 16), so
    a stage's words for a block of rows are one TMA box [2, rows] of 512-byte contiguous runs."""
    if bits not in TABLE_BITS:
        raise ValueError(f"wgmma_table serves bits in {TABLE_BITS}, got {bits}")
    a, r = table_coefficients(scale, zero, bits)
    code = table_codes(a, zero)  # [N, NG]
    n = scale.shape[0]
    p = 8 // bits
    ns = ell // STAGE_BYTES
    s_idx = torch.arange(ns, device=scale.device)
    words = torch.zeros(ns, 2, -(-n // 4) * 4, dtype=torch.int32, device=scale.device)
    for h in range(2):
        for half, j in enumerate((2 * h, 2 * h + 1)):
            if j < p:
                g = (j * ell + STAGE_BYTES * s_idx) // group_size  # [NS]
                words[:, h, :n] |= code[:, g].t() << (16 * half)
    return words.view(2 * ns, -1), r


def table_reference(packed: torch.Tensor, words: torch.Tensor, r: torch.Tensor, xq: torch.Tensor,
                    sx: torch.Tensor, bits: int) -> torch.Tensor:
    """fp32 [M, N]: the whole-row variant's logits from exactly its operands -- the int8 weights
    ``A (q - z) = A q + (128 - A z) - 128`` of the words' group codes (:func:`wgmma_table`), their
    int32 dot with ``xq`` int8 [M, K], times ``r[n] sx[m]`` (int64 sums, exact; the kernel's int32
    sums agree while K 127^2 < 2^31)."""
    from lowbit.formats.intx import unpack_planes

    n, ell = packed.shape
    p = 8 // bits
    ns = ell // STAGE_BYTES
    k = xq.shape[1]
    codes = unpack_planes(packed, bits).to(torch.int64)  # [N, P L]
    w2 = words.view(ns, 2, -1)[:, :, :n].to(torch.int64) & 0xFFFFFFFF  # [NS, 2, N]
    code = torch.stack([(w2[:, j // 2] >> (16 * (j % 2))) & 0xFFFF for j in range(p)], dim=0)  # [P, NS, N]
    per_k = code.permute(2, 0, 1).repeat_interleave(STAGE_BYTES, dim=2).reshape(n, p * ell)  # code of each K
    wq = (per_k & 0xFF) * codes + (per_k >> 8) - 128  # = A (q - z)
    dot = xq.to(torch.int64) @ wq[:, :k].t()
    return dot.double().mul(sx.double()[:, None]).mul(r.double()[None, :]).float()
