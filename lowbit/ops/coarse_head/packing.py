"""The draft head's coarse copy of a head ``W [N, K]`` and its sharing between heads.

* :class:`CoarsePacking` -- an INTx plane-split copy (``bits`` 2 / 4 / 8, see
  :class:`lowbit.formats.INTx`) or, for NVFP4 and FP8 per-row weights, the stored rows themselves
  (``bits=None``, "native", no extra memory); plus the kernel-specific tilings of the codes, each
  built on first use.
* :func:`pack` -- the copy of a weight, shared through a weak cache keyed by the weight's identity
  and version (thread-safe).
* :func:`exact_rows_fn` / :func:`exact_logits` -- the exact rows and logits the certified fallback
  scores against.
"""
from __future__ import annotations

import threading
import weakref

import torch

from lowbit.formats.fp8 import FP8
from lowbit.formats._base import require_finite
from lowbit.formats.intx import INTx, fp16_scale_exp
from lowbit.formats.nvfp4 import NVFP4
from lowbit.ops.coarse_head.reference import exact_logits_chunked

#: packing kinds (also the Triton epilogue's ``KIND``)
KIND_INTX, KIND_FP8, KIND_NVFP4 = 0, 1, 2


class CoarsePacking:
    """The coarse copy of one head. Shared between heads over the same weight (see :func:`pack`).

    kind: KIND_INTX (``fmt`` an :class:`INTx`), KIND_FP8 (``fmt`` an :class:`FP8` with row
    scales: the checkpoint's rows, nothing copied) or KIND_NVFP4 (the checkpoint's rows).
    ``bits`` is None for the native kinds. ``dense()`` (the fp32 dequantized rows, cached) is only
    built for the reference path.

    ``coarse_exp`` (INTx only, an int >= 0, almost always 0): the INTx copy quantizes
    ``W * 2^-coarse_exp``, the smallest power-of-two prescale whose group scales all fit fp16 (a
    head with a 1e8 entry needs a few). Everything the coarse pass computes -- coarse logits, the
    bounds, the candidate keys -- is then ``2^-coarse_exp`` times the unscaled value; the
    certification and the candidate selection only compare coarse keys among themselves (a common
    positive power-of-two factor changes no decision) and the exact rescoring reads the original
    weight. What returns coarse values to the user (``coarse_head``, ``DraftHead.logits``) scales
    them back by ``2^coarse_exp``, which is exact in fp32.
    """

    def __init__(self, kind: int, fmt, n: int, k: int, bits: int | None, group_size: int, coarse_exp: int = 0):
        self.kind, self.fmt, self.n, self.k, self.bits, self.group_size = kind, fmt, n, k, bits, group_size
        self.coarse_exp = coarse_exp
        self._dense = None
        self._coef = None
        self._mma = None
        self._wgmma = None
        self._wgmma_table = None
        self.tensors = tuple(fmt._tensor_fields().values())
        # INTx rows of whole, 16-byte aligned int32 words (the word-reading kernels' condition); fixed
        # for the packing's life, so a traced call needs no pointer
        p = fmt.packed if kind == KIND_INTX else None
        self.words_aligned = (p is not None and p.shape[1] % 4 == 0 and p.stride(1) == 1 and p.stride(0) % 4 == 0
                              and p.data_ptr() % 16 == 0)

    @property
    def device(self) -> torch.device:
        return self.tensors[0].device

    @property
    def nbytes(self) -> int:
        """Bytes one coarse pass streams (packed codes + scales + zeros, or the native rows)."""
        return self.fmt.nbytes

    def to(self, device) -> "CoarsePacking":
        """The same coarse copy on ``device`` (an uncached copy; for tests and CPU evaluation)."""
        return CoarsePacking(self.kind, self.fmt.to(device), self.n, self.k, self.bits, self.group_size,
                             self.coarse_exp)

    @property
    def padded_k(self) -> int:
        return self.fmt.padded_k if self.kind == KIND_INTX else self.k

    def dense(self) -> torch.Tensor:
        """fp32 [N, K]: the dequantized coarse rows (exact in fp32), cached for the reference."""
        if self._dense is None:
            self._dense = self.fmt.dequantize(torch.float32)
        return self._dense

    def mma_tiled(self) -> tuple[torch.Tensor, torch.Tensor]:
        """INTx only: (words, scale-zero) tiled for the tensor-core coarse pass of
        ``mma_f16.py``, built on first use and kept (as many bytes again as the codes, plus
        4 bytes per row and group)."""
        if self._mma is None:
            from lowbit.ops.coarse_head.mma_pack import mma_tile

            self._mma = mma_tile(self.fmt.packed, self.fmt.scale, self.fmt.zero, self.bits, self.group_size)
        return self._mma

    def wgmma_words(self) -> torch.Tensor:
        """INTx only: the group scales and zero points of the int8-wgmma pass
        (``wgmma_pack.wgmma_sz``: fp16 scales [P NS, NP] then zero bytes [NS, NP], stage-major, in
        one uint8 buffer), built on first use and kept (2 P + 1 bytes per row and 64-byte stage:
        INT4 5, INT2 9)."""
        if self._wgmma is None:
            from lowbit.ops.coarse_head.wgmma_pack import wgmma_sz

            f = self.fmt
            self._wgmma = wgmma_sz(f.scale, f.zero, self.bits, self.group_size, f.packed.shape[1])
        return self._wgmma

    def wgmma_table(self) -> tuple[torch.Tensor, torch.Tensor]:
        """INT2 only: the words and fp32 row units of the int8-wgmma pass's whole-row variant
        (``wgmma_pack.wgmma_table``: group scales rounded to integer multiples of a row unit),
        built on first use and kept (2 bytes a group -- 8 per row and 64-byte stage -- plus 4 a
        row)."""
        if self._wgmma_table is None:
            from lowbit.ops.coarse_head.wgmma_pack import wgmma_table

            f = self.fmt
            self._wgmma_table = wgmma_table(f.scale, f.zero, self.bits, self.group_size, f.packed.shape[1])
        return self._wgmma_table

    def coef(self) -> torch.Tensor | None:
        """fp32 [N, NG]: the INTx group scales ``s`` (the bound's coefficients); None if native."""
        if self.kind != KIND_INTX:
            return None
        if self._coef is None:
            self._coef = self.fmt.scale.float()
        return self._coef


def _format_tensors(weight) -> tuple[torch.Tensor, ...]:
    if isinstance(weight, FP8):
        return (weight.data, weight.scale)
    if isinstance(weight, NVFP4):
        return (weight.packed, weight.scale, weight.global_scale)
    return (weight,)


def weight_version(weight) -> tuple:
    """Identity + version of a weight: storage pointer, offset, shape, stride, dtype, device, _version."""
    return tuple(
        (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype,
         str(t.device), t._version)
        for t in _format_tensors(weight)
    )


# (weight identity + version, bits, group_size) -> weakref to the packing. A packing lives only as
# long as some head holds it, and every such head holds the weight, so its storage cannot be
# freed and reused by another tensor while the entry is alive.
_CACHE: dict[tuple, weakref.ref] = {}
_CACHE_LOCK = threading.Lock()


def pack(weight, bits: int | None, group_size: int) -> CoarsePacking:
    """The coarse copy of ``weight`` (dense [N, K] float, FP8 row, or NVFP4), shared via a weak cache.

    ``bits`` in {2, 4, 8}: INTx plane-split with ``group_size`` (K padded internally, see INTx).
    ``bits=None``: native — an FP8 / NVFP4 weight's own rows are the coarse copy.
    """
    key = (weight_version(weight), bits, group_size)
    with _CACHE_LOCK:
        for dead in [k for k, r in _CACHE.items() if r() is None]:
            del _CACHE[dead]
        ref = _CACHE.get(key)
        hit = ref() if ref is not None else None
    if hit is not None:
        return hit
    packing = _new_packing(weight, bits, group_size)
    with _CACHE_LOCK:  # another thread may have packed the same weight meanwhile: keep the first
        ref = _CACHE.get(key)
        hit = ref() if ref is not None else None
        if hit is not None:
            return hit
        _CACHE[key] = weakref.ref(packing)
    return packing


def _require_finite_weight(weight) -> None:
    """ValueError naming where an FP8 / NVFP4 weight holds (or dequantizes to) a non-finite value.
    A dense weight is checked where it is quantized (an FP8 / NVFP4 one is checked here by its
    parts, without dequantizing it whole: a finite code times finite scales can still overflow)."""
    if isinstance(weight, FP8):
        require_finite("weight.data", weight.data.float())
        require_finite("weight.scale", weight.scale)
        require_finite("weight (data * scale per row)", weight.data.float().abs().amax(1, keepdim=True) * weight.scale.abs())
    elif isinstance(weight, NVFP4):
        require_finite("weight.scale", weight.scale.float())
        require_finite("weight.global_scale", weight.global_scale)
        require_finite("weight (6 * scale * global_scale)", weight.scale.float() * 6.0 * weight.global_scale.abs())


def _new_packing(weight, bits: int | None, group_size: int) -> CoarsePacking:
    _require_finite_weight(weight)
    if bits is None:
        if isinstance(weight, FP8):
            return CoarsePacking(KIND_FP8, weight, weight.data.shape[0], weight.data.shape[1], None,
                                 weight.data.shape[1])
        if isinstance(weight, NVFP4):
            n, k = weight.shape
            return CoarsePacking(KIND_NVFP4, weight, n, k, None, 16)
        raise ValueError(f"bits=None (native coarse rows) needs an FP8 or NVFP4 weight, got {type(weight).__name__}")
    dense = weight if isinstance(weight, torch.Tensor) else weight.dequantize(torch.float32)
    require_finite("weight", dense)
    # The smallest power-of-two prescale whose group scales fit fp16 (see CoarsePacking). The bound
    # stays sound in the scaled domain: w' = w * 2^-e is exact in fp32 except where it underflows,
    # and an element that small (< 2^-126) is coded as 0 with an error |w'| far below s'/2 (every
    # scale is >= 2^-24), so |w' - w~'| <= s'/2 still holds; the fp32 rounding terms scale with the
    # values; and the absolute slack ABS_SLACK (underflow of x's parts times |w~'| <= 255 * 65504,
    # which holds for the scaled copy whose scales fit fp16) is applied in the scaled domain, i.e.
    # it stands for 2^e * ABS_SLACK >= ABS_SLACK unscaled: only more conservative.
    exp = fp16_scale_exp(dense, bits, group_size)
    if exp:
        dense = dense.float() * torch.tensor(2.0**-exp, dtype=torch.float32, device=dense.device)
    fmt = INTx.quantize(dense, bits=bits, group_size=group_size)
    return CoarsePacking(KIND_INTX, fmt, dense.shape[0], dense.shape[1], bits, group_size, exp)


def exact_rows_fn(weight):
    """``rows(lo, hi) -> fp32 [hi - lo, K]``: exact rows of a dense / FP8-row / NVFP4 weight."""
    if isinstance(weight, FP8):
        return lambda lo, hi: weight.data[lo:hi].float() * weight.scale[lo:hi]
    if isinstance(weight, NVFP4):
        return lambda lo, hi: NVFP4(weight.packed[lo:hi], weight.scale[lo:hi], weight.global_scale).dequantize(torch.float32)
    return lambda lo, hi: weight[lo:hi].float()


def exact_logits(x: torch.Tensor, weight, n: int) -> torch.Tensor:
    """Exact fp32 logits [B, N] (chunked dequantize + fp32 matmul): the certified fallback."""
    return exact_logits_chunked(x, exact_rows_fn(weight), n)


def raw_tensors(packing: CoarsePacking):
    """The stored tensors the Triton kernels read: (codes, scale, zero, global scale) by kind."""
    f = packing.fmt
    if packing.kind == KIND_INTX:
        return f.packed, f.scale, f.zero, f.scale
    if packing.kind == KIND_FP8:
        return f.data.view(torch.uint8), f.scale, f.scale, f.scale
    return f.packed, f.scale.view(torch.uint8), f.packed, f.global_scale


__all__ = ["KIND_FP8", "KIND_INTX", "KIND_NVFP4", "CoarsePacking", "exact_logits", "exact_rows_fn", "pack",
           "raw_tensors", "weight_version"]
