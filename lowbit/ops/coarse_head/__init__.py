"""The draft head's coarse pass and candidate selection (used by :class:`lowbit.nn.DraftHead`).

* :class:`CoarsePacking` / :func:`pack` — the coarse copy of a head ``W [N, K]``: an INTx
  plane-split copy (``bits`` 2/4/8, see :class:`lowbit.formats.INTx`) or, for NVFP4 and FP8
  per-row weights, the stored rows themselves (``bits=None``, "native", no extra memory).
* :func:`coarse_head` — one fused pass: coarse logits, per-token bound, per-block top-``kcand``
  candidates. Triton for CUDA tensors, :mod:`.reference` otherwise (``lowbit._backend``).
* :func:`select_fast`, :func:`certify`, :func:`argmax_lowest`, :func:`topk_lowest` — the selection
  step over the ``[M, nblocks * kcand]`` candidates (plain torch ops: no host synchronization).

Registered op: ``torch.ops.lowbit.coarse_head`` (the Triton path; ``custom_op`` + ``register_fake``,
mutates nothing) so the fast path compiles with ``torch.compile(fullgraph=True)``.
"""
from __future__ import annotations

import math
import weakref

import torch

from lowbit._backend import use_triton
from lowbit._validate import check_tensor, require
from lowbit.formats.fp8 import FP8
from lowbit.formats.intx import INTx
from lowbit.formats.nvfp4 import NVFP4
from lowbit.ops.coarse_head.reference import (
    BOUND_DET,
    BOUND_NONE,
    BOUND_STAT,
    CoarseOut,
    coarse_head_reference,
    exact_logits_chunked,
)

__all__ = [
    "BOUND_DET", "BOUND_NONE", "BOUND_STAT", "CoarseOut", "CoarsePacking", "argmax_lowest",
    "CERTIFIED_MAX_K", "CERTIFIED_STATS", "FUSED_ARGMAX_MIN_M", "certified_select_rerank", "certify", "coarse_head",
    "exact_rows_fn", "fused_certified_argmax", "fused_supported", "row_norms",
    "new_certified_stats", "pack", "select_fast", "topk_lowest",
]

KIND_INTX, KIND_FP8, KIND_NVFP4 = 0, 1, 2
#: M bands with their own launch configuration (see triton.py); warmup() compiles each.
M_BANDS = (1, 16, 32, 64)
_INT64_MAX = 2**63 - 1
_X_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


class CoarsePacking:
    """The coarse copy of one head. Shared between heads over the same weight (see :func:`pack`).

    kind: KIND_INTX (``fmt`` an :class:`INTx`), KIND_FP8 (``fmt`` an :class:`FP8` with row
    scales: the checkpoint's rows, nothing copied) or KIND_NVFP4 (the checkpoint's rows).
    ``bits`` is None for the native kinds. ``dense()`` (the fp32 dequantized rows, cached) is only
    built for the reference path.
    """

    def __init__(self, kind: int, fmt, n: int, k: int, bits: int | None, group_size: int):
        self.kind, self.fmt, self.n, self.k, self.bits, self.group_size = kind, fmt, n, k, bits, group_size
        self._dense = None
        self._coef = None
        self._mma = None
        self._wgmma = None
        self._wgmma_table = None
        self.tensors = tuple(fmt._tensor_fields().values())

    @property
    def device(self) -> torch.device:
        return self.tensors[0].device

    @property
    def nbytes(self) -> int:
        """Bytes one coarse pass streams (packed codes + scales + zeros, or the native rows)."""
        return self.fmt.nbytes

    def to(self, device) -> "CoarsePacking":
        """The same coarse copy on ``device`` (an uncached copy; for tests and CPU evaluation)."""
        return CoarsePacking(self.kind, self.fmt.to(device), self.n, self.k, self.bits, self.group_size)

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
        ``triton_mma.py``, built on first use and kept (as many bytes again as the codes, plus
        4 bytes per row and group)."""
        if self._mma is None:
            from lowbit.ops.coarse_head.triton_mma import mma_tile

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


def pack(weight, bits: int | None, group_size: int) -> CoarsePacking:
    """The coarse copy of ``weight`` (dense [N, K] float, FP8 row, or NVFP4), shared via a weak cache.

    ``bits`` in {2, 4, 8}: INTx plane-split with ``group_size`` (K padded internally, see INTx).
    ``bits=None``: native — an FP8 / NVFP4 weight's own rows are the coarse copy.
    """
    key = (weight_version(weight), bits, group_size)
    for dead in [k for k, r in _CACHE.items() if r() is None]:
        del _CACHE[dead]
    ref = _CACHE.get(key)
    hit = ref() if ref is not None else None
    if hit is not None:
        return hit
    if bits is None:
        if isinstance(weight, FP8):
            packing = CoarsePacking(KIND_FP8, weight, weight.data.shape[0], weight.data.shape[1], None, weight.data.shape[1])
        elif isinstance(weight, NVFP4):
            n, k = weight.shape
            packing = CoarsePacking(KIND_NVFP4, weight, n, k, None, 16)
        else:
            raise ValueError(f"bits=None (native coarse rows) needs an FP8 or NVFP4 weight, got {type(weight).__name__}")
    else:
        dense = weight if isinstance(weight, torch.Tensor) else weight.dequantize(torch.float32)
        fmt = INTx.quantize(dense, bits=bits, group_size=group_size)
        packing = CoarsePacking(KIND_INTX, fmt, dense.shape[0], dense.shape[1], bits, group_size)
    _CACHE[key] = weakref.ref(packing)
    return packing


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


def coarse_head(
    x: torch.Tensor,
    packing: CoarsePacking,
    *,
    block: int = 128,
    kcand: int = 4,
    bound: int = BOUND_NONE,
    sigma: float = 4.0,
    write_logits: bool = False,
) -> CoarseOut:
    """The fused coarse pass over ``x [M, K]`` (bf16 / fp16 / fp32). See :class:`CoarseOut`.

    ``bound``: BOUND_NONE (fast: key = coarse logit), BOUND_DET or BOUND_STAT (certified: key =
    upper bound, plus lower bounds and each block's best unemitted key). ``block`` tokens per
    candidate block (a power of two, 16..256), ``kcand`` candidates per block (1..block).
    Nothing is mutated.
    """
    check_tensor("x", x, dtypes=_X_DTYPES, ndim=2)
    require(x.shape[1] == packing.k, f"x has K={x.shape[1]} (shape {tuple(x.shape)}), the head has K={packing.k}")
    compiling = torch.compiler.is_compiling()
    require(compiling or x.device == packing.device, f"x is on {x.device}, the coarse weight on {packing.device}")
    require(block >= 16 and block <= 256 and block & (block - 1) == 0, f"block must be a power of two in [16, 256], got {block}")
    require(1 <= kcand <= block, f"kcand must be in [1, block={block}], got {kcand}")
    require(bound in (BOUND_NONE, BOUND_DET, BOUND_STAT), f"bound must be 0, 1 or 2, got {bound}")
    require(not (bound == BOUND_STAT and packing.bits is None), "the statistical bound needs an INTx coarse copy (native rows have no quantization error)")
    if x.shape[0] == 0:
        raise ValueError(f"x has no rows (shape {tuple(x.shape)})")
    # traced graphs: Triton exactly for CUDA tensors (use_triton's import probe is not traceable)
    if (x.is_cuda if compiling else use_triton(x, *packing.tensors)):
        w, s, z, gs = _raw(packing)
        if _use_wgmma(packing, x, bound, block, compiling):
            s, z = _wgmma_operands(packing)
        elif _use_mma(packing, x.shape[0], bound, block, compiling):
            w, s = packing.mma_tiled()
            z = s
        # eager: call the launcher directly (the op wrapper costs several µs of Python at M = 1);
        # under torch.compile the registered op is traced instead
        op = torch.ops.lowbit.coarse_head if compiling else _coarse_head_impl
        outs = op(x, w, s, z, gs, packing.kind, packing.bits or 0, packing.group_size,
                                            packing.n, packing.padded_k, block, kcand, bound, float(sigma),
                                            bool(write_logits))
        return CoarseOut(*outs)
    return coarse_head_reference(x, packing.dense(), packing.coef(), bits=packing.bits,
                                 group_size=packing.group_size, bound=bound, sigma=sigma, block=block,
                                 kcand=kcand, write_logits=write_logits)


#: Fast mode at M <= MMA_MAX_M on an INTx copy: the tensor-core coarse pass (``triton_mma.py``;
#: the packing keeps its own tiling of the codes). One launch serves 16 rows (two 8-column B
#: tiles, the A fragments decoded once). H200, 124160 x 5120, fast argmax at M = 16
#: (scripts/bench_retiled.py, docs/measurements/2026-12-01_bench_retiled_session5_start.json):
#: INT4 197 µs vs 271 on the band kernels, INT8 264 vs 354; INT2 259 vs 244 before its register
#: cap (``triton_mma._register_cap``). Larger M loops over launches of 16. 0 turns it off.
MMA_MAX_M = 16
#: Certified mode (the deterministic bound) on the tensor-core pass up to this M (the bound is
#: accumulated in the epilogue, see ``triton_mma.mma_bound_coef``); larger M and the statistical
#: bound take the fp32 band kernels. H200, SmolLM2's 49152 x 576 head, INT8 g64, certified
#: coarse pass under graph replay, cold L2 (scripts/profile_certified_stages.py,
#: docs/measurements/2026-12-01_session8_c_stages.json): tensor cores / band kernels 21.6 / 25.1
#: µs at M = 1, 26.6 / 36.2 at M = 4, 39.7 / 36.7 at M = 16 (two column tiles), 71.1 / 51.3 at
#: M = 32 (two launches). 0 turns it off.
MMA_MAX_M_CERTIFIED = 8


#: Fast mode on an INTx copy, per bits: the rows of x (inclusive range) that take the int8-wgmma
#: pass (``gluon_wgmma.py``: x rounded to int8 per row, codes multiplied exactly, M <= 64 in one
#: launch) on an sm_90 GPU. Empty: never. H200, 124160 x 5120 g64, fast argmax under graph replay
#: against the dispatch before it (scripts/bench_coarse_wgmma.py,
#: docs/measurements/2026-12-02_session14_e_wgmma.log): INT2 / INT4 at M = 8 111.5 / 143.4 µs vs
#: 123.5 / 152.4, M = 16 132.7 / 156.8 vs 199.0 / 202.9, M = 32 171.6 / 195.3 vs 314.5 / 333.2,
#: M = 64 330.5 / 372.3 vs 504.8 / 625.1; slower at M = 1 (110.2 / 141.5 vs 97.5 / 123.3) and M = 4
#: (111.9 / 141.9 vs 107.5 / 133.9), where the mma.sync pass's 4-row tile still serves. M = 5..7
#: run the mma pass's 8-row tile (the M = 8 cost), so the pass takes them. INT2 runs the whole-row
#: variant (``WGMMA_TABLE_BITS``), faster than the mma.sync pass from M = 1 (eighteenth session,
#: docs/measurements/2026-12-03_session18_d_head_fast_d.log: fast argmax 94.2 vs 97.4 us at M = 1,
#: 95.2 vs 107.3 at M = 4), so it serves every M. INT4 too since the twenty-sixth session's
#: warp-specialized per-group kernel (docs/measurements/2026-12-04_session26_e_head_int4.log, same
#: run: 118.2 vs 119.8 us at M = 1, 118.9 vs 131.0 at M = 4 against the mma.sync pass).
WGMMA_M_RANGE: dict = {2: (1, 64), 4: (1, 64)}


#: INTx widths whose int8-wgmma pass is the whole-row variant (``gluon_wgmma.py``, ``TABLE``):
#: group scales rounded to integer multiples of one unit per token row, one int32 wgmma chain
#: over all of K, no per-group epilogue. Fast-mode accuracy on SmolLM2's head is that of the
#: exact scales (H200, 8192 real hidden states, INT2 g64 k8 r64: argmax agreement 94.055% vs
#: 94.019%, recall@16 67.17% vs 67.22%; ``scripts/sim_table_coarse.py`` on the CPU agrees). H200,
#: 124160 x 5120, fast argmax: 94.2 / 106.7 / 130.1 / 196.7 us at M = 1 / 16 / 32 / 64 against
#: 110.6 / 132.2 / 170.6 / 273.3 per group (docs/draft_head.md, "Eighteenth session"); with the
#: byte-permute decode 91.3 / 103.5 / 129.8 / 191.0 ("Nineteenth session"). Empty: the per-group
#: pass everywhere.
WGMMA_TABLE_BITS: tuple = (2,)


def _use_wgmma(packing: CoarsePacking, x: torch.Tensor, bound: int, block: int, compiling: bool) -> bool:
    """Whether this call takes the int8-wgmma pass: fast mode, an INTx copy with g64-multiple groups
    and whole 64-byte stages, blocks of 64 / 128 tokens, M in ``WGMMA_M_RANGE[bits]``, an sm_90
    GPU. Under torch.compile only if the words already exist (``DraftHead.warmup`` builds them)."""
    if bound != BOUND_NONE or packing.kind != KIND_INTX or packing.bits not in WGMMA_M_RANGE:
        return False
    lo, hi = WGMMA_M_RANGE[packing.bits]
    if not (lo <= x.shape[0] <= hi and block in (64, 128) and packing.group_size % 64 == 0
            and packing.fmt.packed.shape[1] % 64 == 0 and x.is_cuda):
        return False
    if compiling:  # the words exist only where an eager call (warmup) took this path
        return (packing._wgmma_table if packing.bits in WGMMA_TABLE_BITS else packing._wgmma) is not None
    from lowbit.ops.coarse_head.gluon_wgmma import wgmma_available

    return wgmma_available(x.device)


def _use_mma(packing: CoarsePacking, m: int, bound: int, block: int, compiling: bool) -> bool:
    """Whether this call takes the tensor-core pass: fast mode or the deterministic bound, on an
    INTx copy with g64-multiple groups, blocks of whole 32-row tiles (1-8 warps) and whole int32
    words per row. Under torch.compile only if the private tiling already exists
    (``DraftHead.warmup`` builds it eagerly): building it is not part of a traced call."""
    limit = MMA_MAX_M if bound == BOUND_NONE else MMA_MAX_M_CERTIFIED if bound == BOUND_DET else 0
    return (packing.kind == KIND_INTX and m <= limit
            and packing.group_size % 64 == 0 and block % 32 == 0 and 32 <= block <= 256
            and packing.fmt.packed.shape[1] % 4 == 0 and (not compiling or packing._mma is not None))


def _wgmma_operands(packing: CoarsePacking) -> tuple[torch.Tensor, torch.Tensor]:
    """(s, z) of the int8-wgmma pass in the kernel's argument slots: the whole-row variant's int32
    words and fp32 row units (``WGMMA_TABLE_BITS``), else the uint8 [(2 P + 1) NS NP] buffer of fp16
    scales and zero bytes in both."""
    if packing.bits in WGMMA_TABLE_BITS:
        return packing.wgmma_table()
    words = packing.wgmma_words()
    return words, words


def _raw(packing: CoarsePacking):
    """The stored tensors the kernel reads: (codes, scale, zero, global scale) by kind."""
    f = packing.fmt
    if packing.kind == KIND_INTX:
        return f.packed, f.scale, f.zero, f.scale
    if packing.kind == KIND_FP8:
        return f.data.view(torch.uint8), f.scale, f.scale, f.scale
    return f.packed, f.scale.view(torch.uint8), f.packed, f.global_scale


def _coarse_head_impl(x: torch.Tensor, w: torch.Tensor, s: torch.Tensor, z: torch.Tensor, gs: torch.Tensor,
                      kind: int, bits: int, group_size: int, n: int, padded_k: int, block: int, kcand: int,
                      bound: int, sigma: float, write_logits: bool
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    from lowbit.ops.coarse_head.triton import coarse_head_triton

    return coarse_head_triton(x, kind, w, s, z, gs, n=n, bits=bits or None, group_size=group_size,
                              padded_k=padded_k, block=block, kcand=kcand, bound=bound, sigma=sigma,
                              write_logits=write_logits)


_coarse_head_op = torch.library.custom_op("lowbit::coarse_head", _coarse_head_impl, mutates_args=())


@_coarse_head_op.register_fake
def _(x, w, s, z, gs, kind, bits, group_size, n, padded_k, block, kcand, bound, sigma, write_logits):
    m = x.shape[0]
    nb = -(-n // block)
    c = nb * kcand
    cert = m if bound != BOUND_NONE else 0
    f32 = dict(dtype=torch.float32, device=x.device)
    return (x.new_empty(m, c, **f32), x.new_empty(cert, c, **f32), x.new_empty(m, c, dtype=torch.int64),
            x.new_empty(cert, nb, **f32), x.new_empty(cert, nb, **f32),
            x.new_empty(m if write_logits else 0, n, **f32))


#: Fast mode on dense weights: fused select + rerank kernels (``select.py``, 2 launches) instead
#: of the torch ops of :func:`select_fast` + ``gathered_dot`` + :func:`topk_lowest` (~12 launches).
#: Measured on the H200: see docs/draft_head.md ("Measured").
FUSED_SELECT = True


def fast_select_rerank(cand_key: torch.Tensor, cand_idx: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
                       r: int, k: int, kcand: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Fused fast-mode selection: the exact top-``k`` among the ``r`` best coarse candidates
    (values fp32 [M, k] descending, indices int64 [M, k]); ``kcand`` candidates per block as
    emitted by :func:`coarse_head` (0: unknown). Triton only; see ``select.py``."""
    from lowbit.ops.coarse_head.select import fast_select_rerank as impl

    return impl(cand_key, cand_idx, x, weight, r, k, kcand)


# mutates_args=(): the kernel's counter buffer is internal scratch that every call leaves at zero
_fast_select_op = torch.library.custom_op("lowbit::draft_fast_select", fast_select_rerank, mutates_args=())


@_fast_select_op.register_fake
def _(cand_key, cand_idx, x, weight, r, k, kcand=0):
    m = cand_key.shape[0]
    return (cand_key.new_empty(m, k, dtype=torch.float32), cand_key.new_empty(m, k, dtype=torch.int64))


#: Certified mode on dense weights: selection, rescoring and fallback in three Triton launches
#: with no host synchronization (``certified.py``; CUDA-graph capturable) instead of the torch
#: ops + one sync of :meth:`lowbit.nn.DraftHead._certified`. 0 turns it off.
SYNC_FREE_CERTIFIED = True
#: the largest k the sync-free path answers (its per-row lists live in registers)
CERTIFIED_MAX_K = 64
#: the sync-free path's int64 statistics buffer, by position
CERTIFIED_STATS = ("rows", "fallbacks", "wide", "set_sum", "set_max", "calls")


def new_certified_stats(device) -> torch.Tensor:
    """A zeroed statistics buffer (int64 [len(CERTIFIED_STATS)]) for :func:`certified_select_rerank`."""
    return torch.zeros(len(CERTIFIED_STATS), dtype=torch.int64, device=device)


def certified_select_rerank(cand_key: torch.Tensor, cand_lb: torch.Tensor, cand_idx: torch.Tensor,
                            block_lb: torch.Tensor, block_rest: torch.Tensor, x: torch.Tensor,
                            weight: torch.Tensor, k: int, cap: int, stats: torch.Tensor
                            ) -> tuple[torch.Tensor, torch.Tensor]:
    """Certified mode's exact top-``k`` from the certified coarse outputs, without a host
    synchronization (values fp32 [M, k], indices int64 [M, k]); ``stats`` (int64, see
    ``certified.py``) accumulates in place. Triton only."""
    from lowbit.ops.coarse_head.certified import certified_select_rerank as impl

    return impl(cand_key, cand_lb, cand_idx, block_lb, block_rest, x, weight, k, cap, stats)


_certified_op = torch.library.custom_op("lowbit::draft_certified_select", certified_select_rerank,
                                        mutates_args=("stats",))


@_certified_op.register_fake
def _(cand_key, cand_lb, cand_idx, block_lb, block_rest, x, weight, k, cap, stats):
    m = cand_key.shape[0]
    return (cand_key.new_empty(m, k, dtype=torch.float32), cand_key.new_empty(m, k, dtype=torch.int64))


#: Certified argmax on a dense bf16 / fp16 head from this many rows on: the stored rows are their
#: own coarse pass and the selection runs inside the same launch (``fused_argmax.py``), instead of
#: the INTx coarse pass + the selection launch. 0 = every M; a huge value turns it off. H200,
#: SmolLM2's 49152 x 576 head, real hidden states, graph replay, cold L2
#: (``scripts/bench_certified_real.py``, docs/measurements/2026-12-01_session9_e_real_head.json):
#: INT8 path / fused 30.6 / 32.6 µs at M = 1, 35.3 / 33.4 at M = 4, 47.7 / 33.6 at M = 16,
#: 76.0 / 37.4 at M = 32, 98.2 / 45.0 at M = 64 (M = 2, 3 not measured).
FUSED_ARGMAX_MIN_M = 4


def fused_certified_argmax(x: torch.Tensor, weight: torch.Tensor, norms: torch.Tensor, cap: int,
                           stats: torch.Tensor) -> torch.Tensor:
    """Certified exact argmax (int64 [M]) of ``x [M, K] @ weight[N, K]^T`` in one launch, the
    stored rows as their own coarse pass; ``norms`` fp32 [N] the rows' 2-norms rounded up
    (:func:`row_norms`); ``stats`` (int64 ``CERTIFIED_STATS``) accumulates in place.
    Triton only, no host synchronization."""
    from lowbit.ops.coarse_head.fused_argmax import fused_argmax

    return fused_argmax(x, weight, norms, cap, stats)


#: dtypes whose products the tensor cores form exactly (x and weight of the same one)
FUSED_DTYPES = (torch.bfloat16, torch.float16)


def row_norms(weight: torch.Tensor) -> torch.Tensor:
    """fp32 [N]: ``||w_n||_2`` of the stored rows, computed in fp64 (4096 rows at a time) and
    rounded up to fp32."""
    out = torch.empty(weight.shape[0], dtype=torch.float32, device=weight.device)
    for r0 in range(0, weight.shape[0], 4096):
        nd = weight[r0:r0 + 4096].double().square().sum(1).sqrt()
        nf = nd.float()
        out[r0:r0 + 4096] = torch.where(nf.double() < nd, torch.nextafter(nf, torch.full_like(nf, float("inf"))), nf)
    return out


def fused_supported(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether :func:`fused_certified_argmax` takes this pair (same 16-bit float dtype, unit stride along K)."""
    return (x.dtype == weight.dtype and x.dtype in FUSED_DTYPES and weight.dim() == 2 and weight.stride(1) == 1)


_fused_argmax_op = torch.library.custom_op("lowbit::draft_fused_argmax", fused_certified_argmax,
                                           mutates_args=("stats",))


@_fused_argmax_op.register_fake
def _(x, weight, norms, cap, stats):
    return x.new_empty(x.shape[0], dtype=torch.int64)


def argmax_lowest(vals: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """Index of the largest value per row, the lowest index among equals. vals fp32, idx int64 [M, T]."""
    best = vals.amax(-1, keepdim=True)
    return torch.where(vals == best, idx, torch.full_like(idx, _INT64_MAX)).amin(-1)


def topk_lowest(vals: torch.Tensor, idx: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k per row sorted by value descending, the lower index first among equal values."""
    by_idx = idx.argsort(dim=-1, stable=True)
    v, i = vals.gather(-1, by_idx), idx.gather(-1, by_idx)
    by_val = v.argsort(dim=-1, descending=True, stable=True)[:, :k]
    return v.gather(-1, by_val), i.gather(-1, by_val)


def select_fast(out: CoarseOut, r: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``r`` best candidates by coarse logit: (index int64 [M, r'], valid bool [M, r']), r' = min(r, C)."""
    r = min(r, out.cand_key.shape[1])
    key, pos = out.cand_key.topk(r, dim=-1)
    return out.cand_idx.gather(-1, pos), key > float("-inf")


def certify(out: CoarseOut, k: int, cap: int):
    """Certified candidate set for the exact top-``k`` (k = 1: argmax).

    Threshold ``L``: the best lower bound over all tokens (k = 1, from the per-block maxima) or
    the k-th best candidate lower bound (k > 1; any k lower bounds of distinct tokens give a
    valid threshold, since the k-th best exact value is at least their minimum). Every token of
    the exact top-k has ``ub >= L``. The set is certified when no block holds such a token it did
    not emit (``block_rest < L``) and at most ``cap`` candidates reach ``L``.

    Returns (index int64 [M, T], valid bool [M, T], over_block bool [M], over_cap bool [M], size
    int64 [M]), T = min(cap, C): the T candidates with the largest upper bounds, a superset of the
    certified set on every row where neither flag is set. ``over_cap`` without ``over_block``: the
    set is still among the emitted candidates (rescore them all); ``over_block``: a block may
    hide a member (score the whole row).
    """
    c = out.cand_key.shape[1]
    neg = float("-inf")
    if k == 1:
        thr = out.block_lb.amax(-1)
    elif c >= k:
        thr = out.cand_lb.topk(k, dim=-1).values[:, -1]
    else:
        thr = torch.full((out.cand_key.shape[0],), neg, device=out.cand_key.device)
    thr = thr.unsqueeze(-1)
    size = (out.cand_key >= thr).sum(-1)
    over_block = (out.block_rest >= thr).any(-1) | (thr.squeeze(-1) == neg)
    t = min(cap, c)
    key, pos = out.cand_key.topk(t, dim=-1)
    return out.cand_idx.gather(-1, pos), key > neg, over_block, size > cap, size


def nblocks(n: int, block: int) -> int:
    return math.ceil(n / block)
