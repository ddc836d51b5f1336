"""A low-bit LM head that returns the exact argmax / top-k: coarse pass + exact rerank.

See :class:`DraftHead` and docs/draft_head.md (design, the error bound, defaults, numbers).
"""
from __future__ import annotations

import torch
from torch import nn

from lowbit._backend import use_triton
from lowbit._validate import check_tensor, require
from lowbit.formats.fp8 import FP8
from lowbit.formats.nvfp4 import NVFP4
from lowbit.ops.gathered import gathered_dot
from lowbit.ops.coarse_head import (
    BOUND_DET,
    BOUND_NONE,
    BOUND_STAT,
    CERTIFIED_MAX_K,
    CERTIFIED_STATS,
    argmax_lowest,
    certified_select_rerank,
    certify,
    M_BANDS,
    coarse_head,
    new_certified_stats,
    exact_logits,
    fused_certified_argmax,
    pack,
    select_fast,
    topk_lowest,
    weight_version,
)
from lowbit.ops import coarse_head as _coarse_mod

MODES = ("fast", "certified")
BOUNDS = {"det": BOUND_DET, "stat": BOUND_STAT}
# Defaults per mode (measured: docs/draft_head.md). Fast: INT4 g64 with 8 candidates per block of
# 128 and 32 reranked gave 99.8% argmax agreement on SmolLM2-135M. Certified: INT8 g64 with the
# deterministic bound gave a median set of 2 (max 30) tokens there; a cap of 128 also covers
# random N(0, 0.02) heads, whose flat logit tails give sets of ~60-120.
_DEFAULTS = {
    "fast": dict(bits=4, group_size=64, kcand=8, rerank=32),
    "certified": dict(bits=8, group_size=64, kcand=4, rerank=128),
}
_X_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_HOST_COUNTERS = ("_calls", "_rows", "_fallbacks", "_wide", "_set_rows", "_set_sum", "_set_max")
# host counter <- device statistic it adds (CERTIFIED_STATS names; set_max is a maximum)
_DEVICE_SUMS = (("_calls", "calls"), ("_rows", "rows"), ("_fallbacks", "fallbacks"), ("_wide", "wide"),
                ("_set_rows", "rows"), ("_set_sum", "set_sum"))


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
            Kept by reference (never copied): the exact rerank reads it. K % 16 == 0.
        bits: coarse copy: 2, 4 or 8 (INTx plane-split, see :class:`~lowbit.formats.INTx`);
            ``None`` = native (the FP8 / NVFP4 weight's own rows, no extra memory); ``"auto"``
            (default) = native for FP8 / NVFP4, else INT8 (certified) / INT4 (fast).
        group_size: INTx group along K (default 64). Ignored for native rows.
        mode: ``"certified"`` (default; exact by construction, see below) or ``"fast"``
            (approximate: per-block top-``kcand`` candidates, the best ``rerank`` rescored exactly).
        kcand: candidates emitted per block of ``block`` tokens (default 4 certified / 8 fast).
        rerank: fast: how many candidates are rescored exactly (default 32). certified: the cap
            on the rescored set (default 128); a row whose certified set is larger falls back to
            exact scoring of all N tokens.
        bound: ``"det"`` (deterministic, default: ``sum_g s_g/2 ||x_g||_1`` plus fp32 rounding
            slack — exact by construction) or ``"stat"`` (``sigma`` standard deviations of the
            coarse error, ``sqrt(sum_g s_g^2/12 ||x_g||_2^2)``: probabilistic, not a guarantee).
        sigma: the statistical bound's multiple (default 4).
        block: tokens per candidate block (power of two, 16..256, default 128).

    Certified mode: the coarse kernel emits per block its ``kcand`` best upper bounds
    ``ub = c + b``, its best lower bound ``c - b`` and its best unemitted ``ub``. Every token whose
    ``ub`` reaches the best lower bound (top-k: the k-th best) is rescored exactly by
    ``lowbit.ops.gathered_dot`` against the original rows; a row where such a token might be
    missing (a block's unemitted ``ub`` reaches the threshold, or more than ``rerank`` tokens do)
    is scored exactly in full. With a dense weight on the Triton path, ``argmax`` / ``topk`` (k <=
    64) do all of this on the device — selection, rescoring and the fallback in three launches
    after the coarse pass (:mod:`lowbit.ops.coarse_head.certified`), no host synchronization, so
    the call can be captured in a CUDA graph like the fast mode; ``logits`` and the other heads
    read the fallback count back (one host synchronization per call). From
    ``FUSED_ARGMAX_MIN_M`` rows on, a bf16 / fp16 head's certified ``argmax`` (x of the same
    dtype) is one launch over the stored rows instead (:mod:`lowbit.ops.coarse_head.fused_argmax`:
    the products are exact, the bound covers the fp32 accumulation, near-ties are rescored in the
    same launch): on a short-K head the coarse pass is latency-bound, so the INTx copy saves
    nothing there and the selection launch it needs is what costs.

    Ties: equal exact values are ordered by the lower token index first (argmax and top-k).
    Exact values are fp32 dot products of the stored x and weight rows (fp32 accumulation).

    ``stats``: calls, rows, fallbacks (rows scored in full), mean / max certified-set size. The
    device path keeps its counts on the device (so replays of a captured graph count too);
    reading ``stats`` synchronizes.

    Lifecycle: a weight that is still all zeros at construction (a drafter sharing a target's
    head that is loaded later) is quantized on the first call; an in-place update of the weight
    (its ``_version`` changes) re-quantizes on the next call. Heads over the same weight and
    config share one packing (a weak cache in :func:`lowbit.ops.coarse_head.pack`).
    """

    def __init__(self, weight, bits="auto", group_size: int = 64, mode: str = "certified",
                 kcand: int | None = None, rerank: int | None = None, bound: str = "det",
                 sigma: float = 4.0, block: int = 128):
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
        require(bits in (None, 2, 4, 8), f"bits must be 2, 4, 8, None (native) or 'auto', got {bits!r}")
        require(bits is not None or native_ok, f"bits=None (native coarse rows) needs an FP8 or NVFP4 weight, got {type(weight).__name__}")
        require(isinstance(group_size, int) and group_size >= 16 and group_size % 16 == 0,
                f"group_size must be a positive multiple of 16, got {group_size!r}")
        require(bound in BOUNDS, f"bound must be one of {tuple(BOUNDS)}, got {bound!r}")
        require(not (bound == "stat" and bits is None), "bound='stat' needs an INTx coarse copy (bits 2/4/8)")
        require(sigma > 0, f"sigma must be positive, got {sigma}")
        require(isinstance(block, int) and 16 <= block <= 256 and block & (block - 1) == 0,
                f"block must be a power of two in [16, 256], got {block!r}")
        kcand = d["kcand"] if kcand is None else kcand
        rerank = d["rerank"] if rerank is None else rerank
        require(isinstance(kcand, int) and 1 <= kcand <= block, f"kcand must be an int in [1, block={block}], got {kcand!r}")
        require(isinstance(rerank, int) and rerank >= 1, f"rerank must be a positive int, got {rerank!r}")
        self.weight = weight  # a plain attribute: kept by reference, never copied or registered
        self.n, self.k = n, k
        self.bits, self.group_size, self.mode = bits, group_size, mode
        self.kcand, self.rerank, self.bound, self.sigma, self.block = kcand, rerank, bound, sigma, block
        # fast mode emits at most this many candidates (k larger than that cannot be answered)
        self._fast_cands = sum(min(kcand, n - b) for b in range(0, n, block))
        self._packing = None
        self._packed_version = None
        self._dstats = None  # int64 device counters of the sync-free certified path
        self._norms = None  # fp32 [N] row 2-norms of a dense weight (the fused certified argmax)
        self.reset_stats()
        if not _is_all_zero(weight):
            self._repack()

    # -- lifecycle ------------------------------------------------------------------------------
    def _repack(self) -> None:
        self._packing = pack(self.weight, self.bits, self.group_size)
        self._packed_version = weight_version(self.weight)
        self._norms = None

    def _ensure_packed(self):
        if torch.compiler.is_compiling():
            # traced graphs skip the version check (storage pointers are not traceable): pack
            # first (warmup) and re-trace after reloading the weight
            require(self._packing is not None, "DraftHead: call warmup() (or the head once) before torch.compile")
            return self._packing
        if self._packing is None or weight_version(self.weight) != self._packed_version:
            if _is_all_zero(self.weight):
                raise ValueError("DraftHead weight is still all zeros: load the weight before the first call "
                                 "(the coarse copy is never quantized from zeros)")
            self._repack()
        return self._packing

    @property
    def packing(self):
        """The coarse copy (None until the weight is non-zero and the head has been called)."""
        return self._packing

    def reset_stats(self) -> None:
        self._calls = self._rows = self._fallbacks = self._wide = self._set_rows = self._set_sum = self._set_max = 0
        if self._dstats is not None:
            self._dstats.zero_()

    @property
    def stats(self) -> dict:
        """calls, rows, fallbacks (rows scored in full), wide (rows whose set exceeded the cap but
        lay among the candidates: all candidates rescored), mean/max certified-set size."""
        c = self._counts()
        rows = c["_rows"]
        mean = c["_set_sum"] / c["_set_rows"] if c["_set_rows"] else float("nan")
        return {"calls": c["_calls"], "rows": rows, "fallbacks": c["_fallbacks"], "wide": c["_wide"],
                "fallback_rate": c["_fallbacks"] / rows if rows else 0.0,
                "mean_set_size": mean, "max_set_size": c["_set_max"]}

    def _counts(self) -> dict:
        """The host counters plus the device path's (reading those synchronizes)."""
        c = {name: getattr(self, name) for name in _HOST_COUNTERS}
        if self._dstats is not None:
            d = dict(zip(CERTIFIED_STATS, self._dstats.tolist()))
            for name, key in _DEVICE_SUMS:
                c[name] += d[key]
            c["_set_max"] = max(c["_set_max"], d["set_max"])
        return c

    def warmup(self, max_m: int = 64, ks=(1, 16)) -> None:
        """Quantize and compile every launch configuration up to ``max_m`` rows (call before
        CUDA-graph capture; nothing is autotuned or compiled lazily inside a capture)."""
        packing = self._ensure_packed()
        dtype = self.weight.dtype if isinstance(self.weight, torch.Tensor) else torch.bfloat16
        # the M bands, and every epilogue tile of the tensor-core coarse pass (one per power of two
        # of the rows in a launch of at most 8: M = 2, 3 .. 4, 5 .. 8, and 9 for a 1-row tail)
        ms = sorted({1, *[b for b in M_BANDS if b <= max_m], *[b for b in (2, 3, 4, 5, 8, 9) if b <= max_m], max_m})
        for m in ms:
            x = torch.randn(m, self.k, device=packing.device, dtype=dtype)
            self.argmax(x)
            for k in ks:
                if 1 < k <= (self._fast_cands if self.mode == "fast" else self.n):
                    self.topk(x, k)
            self.logits(x)
        if packing.device.type == "cuda":
            torch.cuda.synchronize()
        self.reset_stats()

    # -- input handling -------------------------------------------------------------------------
    def _flat(self, x: torch.Tensor) -> torch.Tensor:
        check_tensor("x", x, dtypes=_X_DTYPES)
        require(x.dim() >= 1 and x.shape[-1] == self.k, f"x must be [..., {self.k}], got shape {tuple(x.shape)}")
        x2 = x.reshape(-1, self.k)
        require(x2.shape[0] > 0, f"x has no rows (shape {tuple(x.shape)})")
        packing = self._ensure_packed()
        require(torch.compiler.is_compiling() or x2.device == packing.device,
                f"x is on {x2.device}, the head on {packing.device}")
        return x2

    def _coarse(self, x2, bound: int, write_logits=False):
        return coarse_head(x2, self._packing, block=self.block, kcand=self.kcand, bound=bound,
                           sigma=self.sigma, write_logits=write_logits)

    def _rescore(self, x2, idx, valid):
        exact = gathered_dot(x2, self.weight, idx)
        return torch.where(valid, exact, torch.full_like(exact, float("-inf")))

    def _certified(self, x2, k: int, write_logits=False):
        """Rescored certified candidates, plus the rows whose set did not fit (one host sync).

        Returns (coarse out, idx [M, T], exact vals [M, T], fallback) where fallback is None or
        (rows_wide, wide_idx, wide_vals, rows_full, full_logits): rows whose certified set
        exceeded the cap but lies among the emitted candidates get all their candidates rescored
        (``wide``); rows where a block may hide a member are scored in full (``full``).
        """
        out = self._coarse(x2, BOUNDS[self.bound], write_logits)
        idx, valid, over_block, over_cap, size = certify(out, k, self.rerank)
        vals = self._rescore(x2, idx, valid)
        wide = over_cap & ~over_block
        n_full, n_wide, size_sum, size_max = (
            int(v) for v in torch.stack([over_block.sum(), wide.sum(), size.sum(), size.max()]).tolist())
        self._calls += 1
        self._rows += x2.shape[0]
        self._fallbacks += n_full
        self._wide += n_wide
        self._set_rows += x2.shape[0]
        self._set_sum += size_sum
        self._set_max = max(self._set_max, size_max)
        if not (n_full or n_wide):
            return out, idx, vals, None
        rows_w = wide.nonzero().squeeze(-1)
        w_idx = out.cand_idx[rows_w]
        w_vals = self._rescore(x2[rows_w], w_idx, out.cand_key[rows_w] > float("-inf")) if n_wide else None
        rows_f = over_block.nonzero().squeeze(-1)
        full = self._exact_full(x2[rows_f]) if n_full else None
        return out, idx, vals, (rows_w, w_idx, w_vals, rows_f, full)

    def _device_path(self, x2, k: int) -> bool:
        """Whether certified argmax / top-k runs sync-free on the device (see the class doc)."""
        compiling = torch.compiler.is_compiling()
        return (self.mode == "certified" and _coarse_mod.SYNC_FREE_CERTIFIED and k <= CERTIFIED_MAX_K
                and isinstance(self.weight, torch.Tensor)
                and (x2.is_cuda if compiling else use_triton(x2, self.weight)))

    def _device_stats(self, device) -> torch.Tensor:
        st = self._dstats
        if st is None or st.device != device:
            require(not torch.compiler.is_compiling(),
                    "DraftHead: call warmup() (or the head once) before torch.compile")
            if st is not None:  # moved to another device: keep the counts on the host
                self._fold_device_stats()
            st = self._dstats = new_certified_stats(device)
        return st

    def _fold_device_stats(self) -> None:
        for name, value in self._counts().items():
            setattr(self, name, value)

    def _fused_path(self, x2) -> bool:
        """Whether certified argmax takes the one-launch fused kernel over the stored rows
        (:mod:`lowbit.ops.coarse_head.fused_argmax`): a dense bf16 / fp16 weight, x of the same
        dtype, at least ``FUSED_ARGMAX_MIN_M`` rows, on the Triton path."""
        compiling = torch.compiler.is_compiling()
        return (x2.shape[0] >= _coarse_mod.FUSED_ARGMAX_MIN_M and self._device_path(x2, 1)
                and _coarse_mod.fused_supported(x2, self.weight) and (self._norms is not None or not compiling))

    def _fused_argmax(self, x2) -> torch.Tensor:
        if self._norms is None:
            self._norms = _coarse_mod.row_norms(self.weight)
        stats = self._device_stats(x2.device)
        op = torch.ops.lowbit.draft_fused_argmax if torch.compiler.is_compiling() else fused_certified_argmax
        return op(x2, self.weight, self._norms, self.rerank, stats)

    def _certified_device(self, x2, k: int):
        """Certified exact top-``k`` on the device: (vals fp32 [M, k], idx int64 [M, k])."""
        out = self._coarse(x2, BOUNDS[self.bound])
        stats = self._device_stats(x2.device)
        compiling = torch.compiler.is_compiling()
        op = torch.ops.lowbit.draft_certified_select if compiling else certified_select_rerank
        return op(out.cand_key, out.cand_lb, out.cand_idx, out.block_lb, out.block_rest, x2, self.weight, k,
                  self.rerank, stats)

    def _exact_full(self, xr):
        """Exact fp32 logits [B, N] of whole rows: the same gathered_dot as the rerank on the GPU
        (streams the stored rows, nothing dequantized in full), a chunked fp32 matmul on the CPU."""
        if xr.device.type != "cuda":
            return exact_logits(xr, self.weight, self.n)
        ar = torch.arange(self.n, device=xr.device)
        return torch.cat([gathered_dot(xr[i:i + 8], self.weight, ar.expand(min(8, xr.shape[0] - i), -1))
                          for i in range(0, xr.shape[0], 8)])

    def _fast_best(self, x2, k: int):
        """Fast mode's exact top-``k`` among the reranked candidates: (vals fp32 [M, k], idx int64
        [M, k]). Dense weights on the Triton path use the fused select + rerank kernels
        (:mod:`lowbit.ops.coarse_head.select`, two launches); otherwise torch ops."""
        compiling = torch.compiler.is_compiling()
        if (_coarse_mod.FUSED_SELECT and isinstance(self.weight, torch.Tensor)
                and (x2.is_cuda if compiling else use_triton(x2, self.weight))):
            out = self._coarse(x2, BOUND_NONE)
            op = torch.ops.lowbit.draft_fast_select if compiling else _coarse_mod.fast_select_rerank
            v, i = op(out.cand_key, out.cand_idx, x2, self.weight, max(self.rerank, k), k, self.kcand)
            if compiling:
                self._calls += 1
                self._rows += x2.shape[0]
            else:  # plain ints: skip nn.Module.__setattr__ (µs of host time per call at M = 1)
                d = self.__dict__
                d["_calls"] += 1
                d["_rows"] += x2.shape[0]
            return v, i
        _, idx, vals = self._fast(x2, k)
        if k == 1:
            return None, argmax_lowest(vals, idx)[:, None]
        return topk_lowest(vals, idx, k)

    def _fast(self, x2, k: int, write_logits=False):
        out = self._coarse(x2, BOUND_NONE, write_logits)
        idx, valid = select_fast(out, max(self.rerank, k))
        vals = self._rescore(x2, idx, valid)
        self._calls += 1
        self._rows += x2.shape[0]
        return out, idx, vals

    def _check_k(self, k) -> None:
        require(isinstance(k, int) and not isinstance(k, bool) and 1 <= k <= self.n,
                f"k must be an int in [1, N={self.n}], got {k!r}")
        if self.mode == "fast":
            require(k <= self._fast_cands, f"fast mode emits only {self._fast_cands} candidates (kcand={self.kcand} per block of {self.block}); k={k} is too large")

    # -- public API -----------------------------------------------------------------------------
    def argmax(self, x: torch.Tensor) -> torch.Tensor:
        """int64 [...]: the index of the largest logit per row (lower index among exact ties)."""
        x2 = self._flat(x)
        if self.mode == "fast":
            return self._fast_best(x2, 1)[1][:, 0].view(x.shape[:-1])
        if self._fused_path(x2):
            return self._fused_argmax(x2).view(x.shape[:-1])
        if self._device_path(x2, 1):
            return self._certified_device(x2, 1)[1][:, 0].view(x.shape[:-1])
        _, idx, vals, fb = self._certified(x2, 1)
        ans = argmax_lowest(vals, idx)
        if fb is not None:
            rows_w, w_idx, w_vals, rows_f, full = fb
            if w_vals is not None:
                ans[rows_w] = argmax_lowest(w_vals, w_idx)
            if full is not None:
                ans[rows_f] = argmax_lowest(full, torch.arange(self.n, device=x2.device).expand(rows_f.shape[0], -1))
        return ans.view(x.shape[:-1])

    def topk(self, x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(values fp32 [..., k], indices int64 [..., k]): exact values, sorted descending, the
        lower index first among equal values."""
        self._check_k(k)
        x2 = self._flat(x)
        if self.mode == "fast":
            v, i = self._fast_best(x2, k)
        elif self._device_path(x2, k):
            v, i = self._certified_device(x2, k)
        else:
            _, idx, vals, fb = self._certified(x2, k)
            if vals.shape[1] < k:  # fewer candidates than k: every row falls back
                pad = k - vals.shape[1]
                vals = torch.nn.functional.pad(vals, (0, pad), value=float("-inf"))
                idx = torch.nn.functional.pad(idx, (0, pad))
            v, i = topk_lowest(vals, idx, k)
            if fb is not None:
                rows_w, w_idx, w_vals, rows_f, full = fb
                if w_vals is not None and w_vals.shape[1] >= k:
                    v[rows_w], i[rows_w] = topk_lowest(w_vals, w_idx, k)
                if full is not None:
                    ar = torch.arange(self.n, device=x2.device).expand(rows_f.shape[0], -1)
                    v[rows_f], i[rows_f] = topk_lowest(full, ar, k)
        return v.view(*x.shape[:-1], k), i.view(*x.shape[:-1], k)

    def logits(self, x: torch.Tensor, topk_only: bool = False) -> torch.Tensor:
        """fp32 [..., N]: coarse logits everywhere, exact on the reranked set (fast: the ``rerank``
        best candidates; certified: the rescored argmax set, or the whole row on fallback).
        ``topk_only=True`` puts -inf everywhere outside the reranked set."""
        x2 = self._flat(x)
        if self.mode == "fast":
            out, idx, vals = self._fast(x2, 1, write_logits=not topk_only)
            fb = None
        else:
            out, idx, vals, fb = self._certified(x2, 1, write_logits=not topk_only)
        if topk_only:
            base = torch.full((x2.shape[0], self.n), float("-inf"), device=x2.device)
        else:
            base = out.logits
        # fillers (no token: -inf) are pointed at the row's best candidate, which is always real
        filler = vals == float("-inf")
        idx = torch.where(filler, idx[:, :1], idx)
        vals = torch.where(filler, vals[:, :1], vals)
        base = base.scatter(1, idx, vals)
        if fb is not None:
            rows_w, w_idx, w_vals, rows_f, full = fb
            if w_vals is not None:  # every candidate of these rows was rescored
                filler = w_vals == float("-inf")
                w_idx = torch.where(filler, w_idx[:, :1], w_idx)
                w_vals = torch.where(filler, w_vals[:, :1], w_vals)  # block 0's best: always real
                base[rows_w] = base[rows_w].scatter(1, w_idx, w_vals)
            if full is not None:
                base[rows_f] = full
        return base.view(*x.shape[:-1], self.n)

    def forward(self, x: torch.Tensor, topk_only: bool = False) -> torch.Tensor:
        return self.logits(x, topk_only=topk_only)

    def extra_repr(self) -> str:
        bits = "native" if self.bits is None else f"int{self.bits} g{self.group_size}"
        return (f"N={self.n}, K={self.k}, coarse={bits}, mode={self.mode}, kcand={self.kcand}, "
                f"rerank={self.rerank}, bound={self.bound}, block={self.block}")
