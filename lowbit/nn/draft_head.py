"""A low-bit LM head that returns the exact argmax / top-k: coarse pass + exact rerank.

See :class:`DraftHead` and docs/draft_head.md (design, the error bound, defaults, numbers).
"""
from __future__ import annotations

import math

import torch
from torch import nn

from lowbit._validate import check_tensor, require
from lowbit.formats.fp8 import FP8
from lowbit.formats.nvfp4 import NVFP4
from lowbit.nn.eager_graphs import EagerGraphs, recordable
from lowbit.ops.coarse_head import BOUNDS, PIPELINES, HeadConfig, HeadState, HeadStats, dispatch, pack, weight_version

MODES = ("fast", "certified")
# Defaults per mode (measured: docs/draft_head.md). Fast: INT4 g64 with 8 candidates per block of
# 128 and 32 reranked gave 99.8% argmax agreement on SmolLM2-135M. Certified: INT8 g64 with the
# deterministic bound gave a median set of 2 (max 30) tokens there; a cap of 128 also covers
# random N(0, 0.02) heads, whose flat logit tails give sets of ~60-120.
_DEFAULTS = {
    "fast": dict(bits=4, group_size=64, kcand=8, rerank=32),
    "certified": dict(bits=8, group_size=64, kcand=4, rerank=128),
}
_X_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def _is_all_zero(weight) -> bool:
    if isinstance(weight, FP8):
        return not bool((weight.data.view(torch.uint8) & 0x7F).any())  # 0x80 is -0
    if isinstance(weight, NVFP4):
        return not bool((weight.packed & 0x77).any())  # 0x8 / 0x80 nibbles are -0
    return not bool(weight.any())


class DraftHead(nn.Module):
    """LM head ``x [..., K] @ W[N, K]^T`` that answers argmax / top-k exactly (certified mode).

    Args:
        weight: dense ``[N, K]`` bf16 / fp16 / fp32 tensor, an :class:`~lowbit.formats.FP8` with
            ``granularity="row"`` (compressed-tensors lm_heads) or an :class:`~lowbit.formats.NVFP4`.
            Kept by reference (never copied): the exact rerank reads it. K % 16 == 0. Must be
            finite: a NaN / inf (or an FP8 / NVFP4 weight whose codes or scales are, or overflow)
            is refused with a ``ValueError`` naming where, when the coarse copy is built. Any
            finite weight is answered exactly: an INTx coarse copy whose group scales would not
            fit fp16 (an entry of 1e8) quantizes ``W * 2^-e`` instead (``packing.coarse_exp``);
            ``logits`` returns its coarse values scaled back by ``2^e`` (exact).
        bits: coarse copy: 2, 4 or 8 (INTx plane-split, see :class:`~lowbit.formats.INTx`);
            ``None`` = native (the FP8 / NVFP4 weight's own rows, no extra memory); ``"auto"``
            (default) = native for FP8 / NVFP4, else INT8 (certified) / INT4 (fast).
        group_size: INTx group along K (default 64). Ignored for native rows.
        mode: ``"certified"`` (default; exact by construction, see below) or ``"fast"``
            (approximate: per-block top-``kcand`` candidates, the best ``rerank`` rescored exactly).
        kcand: candidates emitted per block of ``block`` tokens (default 4 certified / 8 fast).
            Left unset, certified ``topk(x, k)`` emits ``max(4, min(4k, block / 16))``.
        rerank: fast: how many candidates are rescored exactly (default 32). certified: the cap
            on the rescored set (default 128, left unset ``max(128, 16k)`` for ``topk(x, k)``);
            a row whose certified set is larger ("wide") has all its candidates rescored (or,
            where a block may hide a member, all N tokens; the sync-free tail from 16 rows on
            scores every wide row in full, 16 rows per weight pass).
        bound: ``"det"`` (deterministic, default: ``sum_g s_g/2 ||x_g||_1`` plus fp32 rounding
            slack — exact by construction) or ``"stat"`` (``sigma`` standard deviations of the
            coarse error, ``sqrt(sum_g s_g^2/12 ||x_g||_2^2)``: probabilistic, not a guarantee).
        sigma: the statistical bound's multiple (default 4).
        block: tokens per candidate block (power of two, 16..256, default 128).
        eager_graphs: replay a CUDA graph for eager CUDA calls (default False): the first eager
            ``argmax`` / ``topk(., k)`` of a row count records itself, later ones with the same rows,
            k and dtype copy x in and replay (:mod:`lowbit.nn.eager_graphs`). Only graph-safe calls
            (:meth:`capturable`); each graph keeps its outputs and scratch on the device.

    Certified mode: the coarse kernel emits per block its ``kcand`` best upper bounds
    ``ub = c + b``, its best lower bound ``c - b`` and its best unemitted ``ub``. Every token whose
    ``ub`` reaches the best lower bound (top-k: the k-th best) is rescored exactly by
    ``lowbit.ops.gathered_dot`` against the original rows; where a block's unemitted ``ub``
    reaches the threshold, all that block's tokens are rescored too (up to two blocks a row); a row
    where more blocks might hide such a token is scored exactly in full; one where more than
    ``rerank`` candidates reach the threshold has all its candidates rescored (see ``rerank``).
    With a dense weight on the Triton path, ``argmax`` / ``topk`` (k <= 64) do all of this on the
    device — selection, rescoring and the fallback in three launches after the coarse pass
    (:mod:`lowbit.ops.coarse_head.certified_tail`), no host synchronization, so the call can be
    captured in a CUDA graph like the fast mode; ``logits`` and the other heads read the fallback
    count back (one host synchronization per call). From
    ``FUSED_ARGMAX_MIN_M`` rows on, a bf16 / fp16 head's certified ``argmax`` (x of the same
    dtype) is one launch over the stored rows instead (:mod:`lowbit.ops.coarse_head.fused_argmax`:
    the products are exact, the bound covers the fp32 accumulation, near-ties are rescored in the
    same launch): on a short-K head the coarse pass is latency-bound, so the INTx copy saves
    nothing there and the selection launch it needs is what costs.

    Ties: equal exact values are ordered by the lower token index first (argmax and top-k).
    Exact values are fp32 dot products of the stored x and weight rows (fp32 accumulation).

    ``stats``: calls, rows, fallbacks (rows scored in full), rescans (rows certified with one or two
    blocks rescored whole), mean / max certified-set size. The
    device path keeps its counts on the device (so replays of a captured graph count too);
    reading ``stats`` synchronizes.

    Lifecycle: a weight that is still all zeros at construction (a drafter sharing a target's
    head that is loaded later) is quantized on the first call; an in-place update of the weight
    (its ``_version`` changes) re-quantizes on the next call. Heads over the same weight and
    config share one packing (a weak cache in :func:`lowbit.ops.coarse_head.pack`).
    """

    def __init__(self, weight, bits="auto", group_size: int = 64, mode: str = "certified",
                 kcand: int | None = None, rerank: int | None = None, bound: str = "det",
                 sigma: float = 4.0, block: int = 128, eager_graphs: bool = False):
        super().__init__()
        require(mode in MODES, f"mode must be one of {MODES}, got {mode!r}")
        if isinstance(weight, FP8):
            require(weight.granularity == "row", f"an FP8 weight must have row scales, got granularity {weight.granularity!r}")
            check_tensor("weight.data", weight.data, ndim=2)
            n, k = weight.data.shape
            native_ok = True
        elif isinstance(weight, NVFP4):
            n, k = weight.shape
            native_ok = True
        elif isinstance(weight, torch.Tensor):
            check_tensor("weight", weight, dtypes=_X_DTYPES, ndim=2)
            n, k = weight.shape
            native_ok = False
        else:
            raise ValueError(f"weight must be a dense tensor, an FP8 (row) or an NVFP4 weight, got {type(weight).__name__}")
        require(k % 16 == 0 and k > 0, f"K must be a positive multiple of 16, got weight shape ({n}, {k})")
        require(n > 0, f"weight has no rows (shape ({n}, {k}))")
        d = _DEFAULTS[mode]
        if bits == "auto":
            bits = None if native_ok else d["bits"]
        if bits == "native":
            bits = None
        require(bits is None or (type(bits) is int and bits in (2, 4, 8)),
                f"bits must be 2, 4, 8, None (native) or 'auto', got {bits!r}")
        require(bits is not None or native_ok, f"bits=None (native coarse rows) needs an FP8 or NVFP4 weight, got {type(weight).__name__}")
        require(type(group_size) is int and group_size >= 16 and group_size % 16 == 0,
                f"group_size must be a positive multiple of 16, got {group_size!r}")
        require(bound in BOUNDS, f"bound must be one of {tuple(BOUNDS)}, got {bound!r}")
        require(not (bound == "stat" and bits is None), "bound='stat' needs an INTx coarse copy (bits 2/4/8)")
        require(isinstance(sigma, (int, float)) and not isinstance(sigma, bool) and math.isfinite(sigma) and sigma > 0,
                f"sigma must be a positive finite number, got {sigma!r}")
        require(type(block) is int and 16 <= block <= 256 and block & (block - 1) == 0,
                f"block must be a power of two in [16, 256], got {block!r}")
        per_k = (kcand is None, rerank is None)  # certified defaults grow with k (certified_sizes)
        kcand = d["kcand"] if kcand is None else kcand
        rerank = d["rerank"] if rerank is None else rerank
        require(type(kcand) is int and 1 <= kcand <= block, f"kcand must be an int in [1, block={block}], got {kcand!r}")
        require(type(rerank) is int and rerank >= 1, f"rerank must be a positive int, got {rerank!r}")
        require(type(eager_graphs) is bool, f"eager_graphs must be a bool, got {eager_graphs!r}")
        self.weight = weight  # a plain attribute: kept by reference, never copied or registered
        self.n, self.k = n, k
        self.bits, self.group_size, self.mode = bits, group_size, mode
        self.kcand, self.rerank, self.bound, self.sigma, self.block = kcand, rerank, bound, sigma, block
        self._config = HeadConfig(mode, kcand, rerank, bound, float(sigma), block, *per_k)
        self._topk, self._logits = PIPELINES[mode]
        # fast mode emits at most this many candidates (k larger than that cannot be answered)
        self._fast_cands = sum(min(kcand, n - b) for b in range(0, n, block))
        self._stats = HeadStats()
        self._state = None  # the pipelines' HeadState, made when the weight is first packed
        self._packed_version = None
        self._graphs = EagerGraphs() if eager_graphs else None
        if not _is_all_zero(weight):
            self._repack()

    # -- lifecycle ------------------------------------------------------------------------------
    def _repack(self) -> None:
        self._state = HeadState(self.weight, pack(self.weight, self.bits, self.group_size), self._config, self._stats)
        self._packed_version = weight_version(self.weight)

    def _ensure_packed(self) -> HeadState:
        if torch.compiler.is_compiling():
            # traced graphs skip the version check (storage pointers are not traceable): pack
            # first (warmup) and re-trace after reloading the weight
            require(self._state is not None, "DraftHead: call warmup() (or the head once) before torch.compile")
            return self._state
        if self._state is None or weight_version(self.weight) != self._packed_version:
            if _is_all_zero(self.weight):
                raise ValueError("DraftHead weight is still all zeros: load the weight before the first call "
                                 "(the coarse copy is never quantized from zeros)")
            self._repack()
        return self._state

    @property
    def packing(self):
        """The coarse copy (None until the weight is non-zero and the head has been called)."""
        return None if self._state is None else self._state.packing

    def reset_stats(self) -> None:
        self._stats.reset()

    @property
    def stats(self) -> dict:
        """calls, rows, fallbacks (rows scored in full), fallback_rate, wide (rows whose set exceeded
        the cap but lay among the candidates: all candidates rescored), rescans (rows certified with
        one or two blocks rescored whole), mean/max certified-set size.
        Reading it synchronizes with the device."""
        return self._stats.snapshot()

    def warmup(self, max_m: int = 64, ks=(1, 16)) -> None:
        """Quantize and compile every launch configuration up to ``max_m`` rows (call before
        CUDA-graph capture; nothing is autotuned or compiled lazily inside a capture)."""
        from lowbit.ops.coarse_head.coarse_fp32 import M_BANDS

        state = self._ensure_packed()
        device = state.packing.device
        dtype = self.weight.dtype if isinstance(self.weight, torch.Tensor) else torch.bfloat16
        # the M bands, and every epilogue tile of the tensor-core coarse pass (one per power of two
        # of the rows in a launch of at most 8: M = 2, 3 .. 4, 5 .. 8, and 9 for a 1-row tail)
        ms = sorted({1, *[b for b in M_BANDS if b <= max_m], *[b for b in (2, 3, 4, 5, 8, 9) if b <= max_m], max_m})
        for m in ms:
            x = torch.randn(m, self.k, device=device, dtype=dtype)
            self.argmax(x)
            for k in ks:
                if 1 < k <= self.max_k:
                    self.topk(x, k)
            self.logits(x)
        if device.type == "cuda":
            torch.cuda.synchronize()
        self.reset_stats()

    # -- input handling -------------------------------------------------------------------------
    def _flat(self, x: torch.Tensor) -> tuple[torch.Tensor, HeadState]:
        check_tensor("x", x, dtypes=_X_DTYPES)
        require(x.dim() >= 1 and x.shape[-1] == self.k, f"x must be [..., {self.k}], got shape {tuple(x.shape)}")
        x2 = x.reshape(-1, self.k)
        require(x2.shape[0] > 0, f"x has no rows (shape {tuple(x.shape)})")
        state = self._ensure_packed()
        require(torch.compiler.is_compiling() or x2.device == state.packing.device,
                f"x is on {x2.device}, the head on {state.packing.device}")
        return x2, state

    @property
    def max_k(self) -> int:
        """The largest k :meth:`topk` answers: N (certified), the candidates emitted (fast)."""
        return self._fast_cands if self.mode == "fast" else self.n

    def capturable(self, k: int = 1) -> bool:
        """Whether ``argmax`` (k = 1) or ``topk(., k)`` on a CUDA device runs with no host
        synchronization, so a CUDA graph may capture it (after :meth:`warmup` with this k): fast
        mode always; certified mode on a dense weight up to ``CERTIFIED_MAX_K``. Certified heads
        over FP8 / NVFP4 rows, and larger k, take the tail that synchronizes once per call (the
        tail routes in :mod:`lowbit.ops.coarse_head.dispatch`)."""
        self._check_k(k)
        return self._graph_safe(k)

    def _graph_safe(self, k: int) -> bool:
        """:meth:`capturable` of a k already checked (the eager-graphs path asks it once per call
        signature)."""
        dense = isinstance(self.weight, torch.Tensor)
        return dispatch.tail_route(dispatch.TailCall(self.mode, k, k == 1, 1, dense, False, True)) != "certified_sync"

    def _check_k(self, k) -> None:
        require(isinstance(k, int) and not isinstance(k, bool) and 1 <= k <= self.n,
                f"k must be an int in [1, N={self.n}], got {k!r}")
        if self.mode == "fast":
            require(k <= self._fast_cands, f"fast mode emits only {self._fast_cands} candidates (kcand={self.kcand} "
                    f"per block of {self.block}); k={k} is too large")

    # -- public API -----------------------------------------------------------------------------
    def argmax(self, x: torch.Tensor) -> torch.Tensor:
        """int64 [...]: the index of the largest logit per row (lower index among exact ties)."""
        x2, state = self._flat(x)
        return self._call(state, x2, 1, True)[1][:, 0].view(x.shape[:-1])

    def topk(self, x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(values fp32 [..., k], indices int64 [..., k]): exact values, sorted descending, the
        lower index first among equal values."""
        self._check_k(k)
        x2, state = self._flat(x)
        v, i = self._call(state, x2, k, False)
        return v.view(*x.shape[:-1], k), i.view(*x.shape[:-1], k)

    def _call(self, state: HeadState, x2: torch.Tensor, k: int, argmax: bool) -> tuple:
        """The pipeline's ``(values, indices)``; with ``eager_graphs``, an eager CUDA call that is
        graph-safe replays its recorded graph (:mod:`lowbit.nn.eager_graphs`)."""
        if self._graphs is not None and recordable(x2):
            key = (k, argmax, tuple(x2.shape), x2.dtype, x2.device)
            return self._graphs.call(key, state, state.stats, lambda xs: self._topk(state, xs, k, argmax=argmax), x2,
                                     count_host=self.mode == "fast", safe=lambda: self._graph_safe(k))
        return self._topk(state, x2, k, argmax=argmax)

    def logits(self, x: torch.Tensor, topk_only: bool = False) -> torch.Tensor:
        """fp32 [..., N]: coarse logits everywhere, exact on the reranked set (fast: the ``rerank``
        best candidates; certified: the rescored argmax set, or the whole row on fallback).
        ``topk_only=True`` puts -inf everywhere outside the reranked set."""
        x2, state = self._flat(x)
        return self._logits(state, x2, topk_only).view(*x.shape[:-1], self.n)

    def forward(self, x: torch.Tensor, topk_only: bool = False) -> torch.Tensor:
        return self.logits(x, topk_only=topk_only)

    def extra_repr(self) -> str:
        bits = "native" if self.bits is None else f"int{self.bits} g{self.group_size}"
        return (f"N={self.n}, K={self.k}, coarse={bits}, mode={self.mode}, kcand={self.kcand}, "
                f"rerank={self.rerank}, bound={self.bound}, block={self.block}"
                + (", eager_graphs=True" if self._graphs is not None else ""))
