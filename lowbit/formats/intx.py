"""Asymmetric INT2 / INT4 / INT8 with per-group scale and zero-point, plane-split packed.

This is the draft head's coarse format. Per (row n, group g of ``group_size`` along K)::

    lo = min(min(w_g), 0)    hi = max(max(w_g), 0)
    s  = fp16_round_up(max((hi - lo) / (2^bits - 1), 1e-8))
    z  = clamp(round(-lo / s), 0, 2^bits - 1)
    q  = clamp(round(w / s + z), 0, 2^bits - 1)
    w~ = (q - z) * s                          so |w - w~| <= s / 2

Two deliberate refinements of the plain min/max rule: the range always contains 0 (a group of
all-positive weights would otherwise clamp its top codes and break the ``s/2`` error bound the
certified head relies on), and ``s`` is rounded *up* to fp16 so the stored scale still covers the
range (rounding it down would clamp the top code too).

Layout (plane-split, so one byte load feeds ``8/bits`` contiguous runs of K)::

    K is padded with zeros to Kp, a multiple of (8/bits) * group_size.
    P = 8 / bits planes, each of length L = Kp / P.
    packed[n, j] (uint8, shape [N, L]) holds, in bits [i*bits, (i+1)*bits), the code of element
    k = i*L + j, for i = 0..P-1.

So for 2 bits the four 2-bit fields of byte j belong to K positions j, L+j, 2L+j and 3L+j; a
kernel reading bytes [j0, j0+BK) gets the four contiguous K runs [iL+j0, iL+j0+BK). Every plane
starts on a group boundary (L is a multiple of group_size), so a K tile never straddles groups
when BK divides group_size or vice versa.

Tensors: ``packed`` uint8 ``[N, Kp/P]``; ``scale`` fp16 ``[N, Kp/G]``; ``zero`` uint8 ``[N, Kp/G]``
(the integer zero-point). Padded groups are all zero (q = z, contributing 0). ``k`` is the
logical K. For INT8, P = 1 and ``packed`` is simply the codes.

Hostile input: ``quantize`` refuses non-finite weights and a group whose scale would not fit
fp16 (``(hi - lo) / (2^bits - 1) > 65504``) with a ``ValueError`` naming the row and group; it never
returns a non-finite scale or dequantized value. Scales that land in fp16's subnormal range (tiny
groups, the ``1e-8`` floor rounds up to ``2^-24``) are still upper bounds of ``range / qmax``, so
the codes never clamp and ``|w - w~| <= s/2`` holds there too. A caller that must quantize any
finite weight (the draft head) prescales by a power of two: :func:`fp16_scale_exp`.
"""
from __future__ import annotations

import dataclasses
import math

import torch

from lowbit._validate import check_tensor, require
from lowbit.formats._base import TensorFormat, require_finite, require_int

BITS = (2, 4, 8)
FP16_MAX = 65504.0


def _fp16_round_up(x: torch.Tensor) -> torch.Tensor:
    """Smallest fp16 value >= x (for positive finite x within fp16 range), as fp32."""
    h = x.to(torch.float16)
    below = h.float() < x
    h = torch.where(below, torch.nextafter(h, torch.full_like(h, float("inf"))), h)
    return h.float()


def padded_k(k: int, bits: int, group_size: int) -> int:
    unit = (8 // bits) * group_size
    return -(-k // unit) * unit


@dataclasses.dataclass(frozen=True)
class INTx(TensorFormat):
    packed: torch.Tensor
    scale: torch.Tensor
    zero: torch.Tensor
    bits: int
    group_size: int
    k: int

    def __post_init__(self):
        require(not isinstance(self.bits, bool) and self.bits in BITS and isinstance(self.bits, int),
                f"INTx bits must be one of {BITS}, got {self.bits!r}")
        require_int("group_size", self.group_size)
        require(self.group_size >= 16 and self.group_size % 16 == 0,
                f"group_size must be a positive multiple of 16, got {self.group_size}")
        require_int("k", self.k)
        require(self.k >= 0, f"k must be non-negative, got {self.k}")
        check_tensor("packed", self.packed, dtypes=(torch.uint8,), ndim=2)
        check_tensor("scale", self.scale, dtypes=(torch.float16,), ndim=2)
        check_tensor("zero", self.zero, dtypes=(torch.uint8,), ndim=2)
        kp = padded_k(self.k, self.bits, self.group_size)
        n = self.packed.shape[0]
        require(self.packed.shape == (n, kp * self.bits // 8),
                f"INTx packed has shape {tuple(self.packed.shape)}, expected ({n}, {kp * self.bits // 8}) for K={self.k}, bits={self.bits}, group_size={self.group_size}")
        require(self.scale.shape == (n, kp // self.group_size) and self.zero.shape == self.scale.shape,
                f"INTx scale/zero have shapes {tuple(self.scale.shape)}/{tuple(self.zero.shape)}, expected ({n}, {kp // self.group_size})")

    @property
    def shape(self) -> torch.Size:
        return torch.Size((self.packed.shape[0], self.k))

    @property
    def planes(self) -> int:
        return 8 // self.bits

    @property
    def padded_k(self) -> int:
        return padded_k(self.k, self.bits, self.group_size)

    @classmethod
    def quantize(cls, w: torch.Tensor, bits: int = 4, group_size: int = 64) -> "INTx":
        """Quantize a 2-D float weight ``[N, K]``; K must be a multiple of 16 (padded internally).

        ``ValueError`` (naming where) for a non-finite weight or a group whose scale
        ``(hi - lo) / (2^bits - 1)`` exceeds fp16's 65504 (prescale such a weight by ``2^-e``,
        :func:`fp16_scale_exp`). Empty weights (N = 0 or K = 0) give an empty, valid INTx.
        """
        check_tensor("w", w, ndim=2)
        require(w.is_floating_point(), f"w must be floating point, got {w.dtype}")
        require(not isinstance(bits, bool) and isinstance(bits, int) and bits in BITS,
                f"INTx bits must be one of {BITS}, got {bits!r}")
        require_int("group_size", group_size)
        require(group_size >= 16 and group_size % 16 == 0, f"group_size must be a positive multiple of 16, got {group_size}")
        n, k = w.shape
        require(k % 16 == 0, f"INTx needs K % 16 == 0, got K={k} (shape {tuple(w.shape)})")
        require_finite("w", w)
        kp = padded_k(k, bits, group_size)
        qmax = (1 << bits) - 1
        g, s = _group_scales(w, bits, group_size)
        bad = ~torch.isfinite(s)
        if bool(bad.any()):
            r, gi = (int(i) for i in bad.nonzero()[0].tolist())
            lo, hi = float(g[r, gi].amin().double().clamp_max(0)), float(g[r, gi].amax().double().clamp_min(0))
            raise ValueError(
                f"w row {r}, group {gi} (K {gi * group_size}..{min(k, (gi + 1) * group_size) - 1}) spans "
                f"[{lo:.6g}, {hi:.6g}]: its INT{bits} scale (range / {qmax} = {(hi - lo) / qmax:.6g}) does not fit "
                f"fp16 (max {FP16_MAX:g}); prescale the weight by a power of two (see fp16_scale_exp)")
        lo = g.amin(-1).clamp_max(0.0)
        z = torch.round(-lo / s).clamp(0, qmax)
        q = torch.round(g / s.unsqueeze(-1) + z.unsqueeze(-1)).clamp(0, qmax).to(torch.uint8).view(n, kp)
        return cls(pack_planes(q, bits), s.to(torch.float16), z.to(torch.uint8), bits, group_size, k)

    @classmethod
    def from_codes(cls, codes: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, bits: int,
                   group_size: int) -> "INTx":
        """An INTx from unsigned codes ``[N, K]`` (integers in ``[0, 2^bits)``), fp16 group scales
        and integer zero-points ``[N, ceil(K / G)]``: ``w = (q - zero) * scale``. K is padded to the
        plane-split width with codes equal to their group's zero-point (value 0); whole padding
        groups get what :meth:`quantize` gives an all-zero group (zero 0, its smallest scale)."""
        n, k = codes.shape
        groups = scale.shape[1]
        kp = padded_k(k, bits, group_size)
        full_zero = torch.zeros(n, kp // group_size, dtype=torch.int64, device=codes.device)
        full_zero[:, :groups] = zero
        full_scale = torch.full((n, kp // group_size), ZERO_GROUP_SCALE, dtype=torch.float16, device=codes.device)
        full_scale[:, :groups] = scale
        q = full_zero.repeat_interleave(group_size, dim=1)
        q[:, :k] = codes
        return cls(pack_planes(q.to(torch.uint8), bits), full_scale, full_zero.to(torch.uint8), bits, group_size, k)

    def codes(self) -> torch.Tensor:
        """The unpacked integer codes ``q`` as uint8 ``[N, Kp]`` (padding included)."""
        return unpack_planes(self.packed, self.bits)

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        n = self.packed.shape[0]
        kp = self.padded_k
        q = self.codes().float().view(n, kp // self.group_size, self.group_size)
        w = (q - self.zero.float().unsqueeze(-1)) * self.scale.float().unsqueeze(-1)
        return w.view(n, kp)[:, : self.k].to(dtype)

    def error_bound(self) -> torch.Tensor:
        """Per-element bound ``s/2`` on ``|w - w~|`` per (row, group), fp32 ``[N, Kp/G]``."""
        return self.scale.float() * 0.5


#: the smallest group scale before fp16 rounding (an all-zero group's range is 0)
SCALE_FLOOR = 1e-8


def _group_scales(w: torch.Tensor, bits: int, group_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(groups fp32 [N, Kp/G, G] zero-padded, scale fp32 [N, Kp/G] rounded up to fp16; inf where
    it does not fit fp16)."""
    n, k = w.shape
    kp = padded_k(k, bits, group_size)
    qmax = (1 << bits) - 1
    wf = torch.zeros(n, kp, dtype=torch.float32, device=w.device)
    wf[:, :k] = w.float()
    g = wf.view(n, kp // group_size, group_size)
    lo = g.amin(-1).clamp_max(0.0)
    hi = g.amax(-1).clamp_min(0.0)
    s = _fp16_round_up(((hi - lo) / torch.full_like(hi, float(qmax))).clamp_min(SCALE_FLOOR))
    return g, s


#: the scale :meth:`INTx.quantize` gives an all-zero group (its ``SCALE_FLOOR`` rounded up to fp16)
ZERO_GROUP_SCALE = float(_fp16_round_up(torch.tensor([SCALE_FLOOR])).item())


def fp16_scale_exp(w: torch.Tensor, bits: int, group_size: int) -> int:
    """Smallest ``e >= 0`` such that every group scale of ``w * 2^-e`` fits fp16 (0 for most
    weights; a head with a 1e8 entry needs a few). ``w`` must be finite."""
    require_finite("w", w)
    wf = w.float()
    amax = float(wf.abs().amax()) if wf.numel() else 0.0
    qmax = (1 << bits) - 1
    # (hi - lo) <= 2 amax: start just below the estimate, then step up on the exact fp32 rule
    e = max(0, math.ceil(math.log2(2.0 * amax / qmax / FP16_MAX)) - 2) if amax > 0 else 0
    while True:
        scaled = wf if e == 0 else wf * torch.tensor(2.0**-e, dtype=torch.float32, device=wf.device)
        if bool(torch.isfinite(_group_scales(scaled, bits, group_size)[1]).all()):
            return e
        e += 1


def pack_planes(q: torch.Tensor, bits: int) -> torch.Tensor:
    """Plane-split pack codes ``[N, Kp]`` (uint8 < 2^bits) into ``[N, Kp*bits/8]``."""
    planes = 8 // bits
    n, kp = q.shape
    require(kp % planes == 0, f"padded K={kp} must be a multiple of {planes}")
    parts = q.view(n, planes, kp // planes)
    out = torch.zeros(n, kp // planes, dtype=torch.uint8, device=q.device)
    for i in range(planes):
        out |= (parts[:, i, :] & ((1 << bits) - 1)) << (i * bits)
    return out


def unpack_planes(packed: torch.Tensor, bits: int) -> torch.Tensor:
    """Inverse of :func:`pack_planes`: ``[N, L]`` bytes -> codes ``[N, L * 8/bits]``."""
    planes = 8 // bits
    mask = (1 << bits) - 1
    parts = [(packed >> (i * bits)) & mask for i in range(planes)]
    return torch.cat(parts, dim=-1)
