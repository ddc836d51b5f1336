"""The drafter's greedy token from a lowbit :class:`~lowbit.DraftHead` over vLLM's LM-head weight.

Engine-agnostic (no vLLM import): :class:`LazyDraftHead` reads duck-typed vLLM objects, a
``LogitsProcessor`` (``soft_cap``, ``scale``) and a ``ParallelLMHead`` (``weight [V_pad, K]``,
``tp_size``, ``shard_indices``; the quantized layouts of :mod:`.weights`), so its logic is tested
without vLLM.

What it answers: ``argmax_v (x @ W[:V]^T)`` for ``x [..., K]`` -> int64 ``[...]``, V the
original vocabulary (padding rows excluded), exact in certified mode; and the top-k drafters'
``get_top_k_tokens`` (:meth:`LazyDraftHead.topk`): the top-k ids and their values as vLLM returns
them. Where lowbit does not apply (:func:`unsupported`, a k the head does not answer, log-probs),
or the weight is not loaded yet, it returns ``None`` and the caller keeps vLLM's path.

The head is built lazily: vLLM builds modules on uninitialized storage and runs a profile pass
before (or without) real weights, so the weight is checked (finite, not all zeros: one host sync)
whenever its identity or version changes (:func:`.weights.tensor_key`: storage pointer, shape,
strides, ``_version``; host-only) and a head is built once per loaded weight, with
one INFO log line naming its configuration. A head on CUDA is then warmed up
(:meth:`~lowbit.DraftHead.warmup`: every launch configuration compiled eagerly), so a later
CUDA-graph capture of the call (vLLM's FULL graphs capture the drafter's sampling) compiles
nothing. Inside a capture the call runs only where it has no host synchronization: a dense head,
or fast mode (the certified argmax over FP8 / NVFP4 rows reads its fallback count back once per
call).
"""
from __future__ import annotations

import torch

from lowbit.formats.fp8 import FP8
from lowbit.formats.nvfp4 import NVFP4
from lowbit.integrations.vllm import stats
from lowbit.integrations.vllm.weights import DENSE, key_tensors, lm_head_weight, tensor_key
from lowbit.ops.coarse_head.dispatch import CERTIFIED_MAX_K
from lowbit.ops.coarse_head.scratch import capturing

_CHUNK_ROWS = 8192  # rows per slice of the readiness scan (bounds its temporary memory)


def unsupported(processor, lm_head, embedding_bias, soft_cap_ok: bool = False) -> str | None:
    """Why lowbit cannot answer this processor's argmax (None if it can). Host-only checks.
    ``soft_cap_ok``: the caller caps only the values it selected (top-k, as vLLM's method does);
    an argmax taken after the cap is not the raw argmax where the cap's rounding makes ties."""
    if getattr(processor, "soft_cap", None) is not None and not soft_cap_ok:
        return "logit soft-capping (soft_cap) is not supported by the lowbit draft head's argmax"
    scale = getattr(processor, "scale", 1.0)
    if not isinstance(scale, (int, float)) or not scale > 0:
        return f"logit scale {scale!r} is not a positive number (the argmax would change)"
    if embedding_bias is not None or getattr(lm_head, "bias", None) is not None:
        return "an LM-head bias is not supported by the lowbit draft head"
    if getattr(lm_head, "tp_size", 1) != 1:
        return f"the LM head is split into {lm_head.tp_size} tensor-parallel vocab shards"
    shards = getattr(lm_head, "shard_indices", None)
    if shards is not None and shards.num_added_elements:
        return "an LM head with added (LoRA) vocabulary rows"
    return None


def _raw_key(lm_head) -> tuple:
    return tuple(tensor_key(t) for t in key_tensors(lm_head))


def weight_ready(weight) -> bool:
    """Finite and not all zeros (one host sync; scans in row slices)."""
    if isinstance(weight, FP8):
        parts = [(d.float() * s).abs().amax() for d, s in
                 zip(weight.data.split(_CHUNK_ROWS), weight.scale.split(_CHUNK_ROWS))]
    elif isinstance(weight, NVFP4):  # E2M1 codes are finite: the scales decide (all-zero codes: not loaded)
        nonzero = bool((weight.packed & 0x77).any())
        parts = [(weight.scale.float() * weight.global_scale).abs().amax()] if nonzero else []
    else:
        parts = [c.abs().amax().float() for c in weight.split(_CHUNK_ROWS)]
    m = float(torch.stack(parts).amax()) if parts else 0.0
    return 0.0 < m < float("inf")  # False for NaN too


def describe(head, role: str) -> str:
    w = head.weight
    if isinstance(w, (FP8, NVFP4)):
        kind = "fp8-row" if isinstance(w, FP8) else "nvfp4"
    else:
        kind = str(w.dtype).replace("torch.", "")
    return f"DraftHead for the {role} LM head ({kind} weight): {head.extra_repr()}"


class LazyDraftHead:
    """A :class:`~lowbit.DraftHead` over one vLLM LM head, built once per loaded weight.

    ``argmax(processor, lm_head, x, embedding_bias)`` -> int64 ``[...]`` for ``x [..., K]``, or
    ``None`` to keep vLLM's path (the reason logged once per process); ``topk(processor, lm_head, x,
    k, embedding_bias)`` -> ``(ids, values)`` or ``None`` likewise. ``head_kwargs``:
    :class:`~lowbit.DraftHead` arguments; ``warmup_m``: rows a CUDA head is warmed up for when
    built (0: none). Counts go to :mod:`stats`.
    """

    def __init__(self, head_kwargs: dict, role: str = "drafter", warmup_m: int = 64):
        self.head_kwargs = dict(head_kwargs)
        self.role = role
        self.warmup_m = warmup_m
        self.head = None
        self._key = None  # raw weight key the current state was made for
        self._reason = None  # why this weight cannot be used (None: usable or not loaded yet)
        self._eager_ks: set[int] = set()  # top-k sizes the current head has answered eagerly (and warmed)

    def _refresh(self, lm_head, x) -> None:
        key = _raw_key(lm_head)
        if key == self._key:
            return
        if capturing(x.device):
            self._reason = ("the LM-head weight was first seen (or changed) inside a CUDA-graph capture, where it "
                            "cannot be checked or a head built: that graph keeps vLLM's path")
            return  # _key unchanged: checked again on the next eager call
        self._key, self.head, self._reason = key, None, None
        weight, self._reason = lm_head_weight(lm_head)
        if weight is None or not weight_ready(weight):
            return  # not loaded yet (profile run): vLLM's path until the weight changes
        from lowbit.nn.draft_head import DraftHead

        try:
            head = DraftHead(weight, **self.head_kwargs)
        except ValueError as e:
            self._reason = f"lowbit.DraftHead refused the {self.role} LM head: {e}"
            return
        warm = ""
        if x.is_cuda and self.warmup_m > 0:
            head.warmup(max_m=self.warmup_m, ks=(1,))
            warm = f", warmed up to M={self.warmup_m}"
        self.head = head
        self._eager_ks = set()
        stats.built(describe(head, self.role) + warm)

    def capturable(self) -> bool:
        """Whether the built head's argmax has no host synchronization (CUDA-graph safe; see
        ``DraftHead.capturable``): fast mode, or certified over a dense weight."""
        return self.head is not None and self.head.capturable()

    def _check(self, processor, lm_head, x, embedding_bias, soft_cap_ok: bool = False) -> str | None:
        """Why this call keeps vLLM's path (None: lowbit answers, or the weight is not loaded yet
        and ``self.head`` is None). Refreshes the head for the current weight (eager calls only)."""
        reason = unsupported(processor, lm_head, embedding_bias, soft_cap_ok)
        if reason is not None:
            return reason
        if x.dim() < 1 or x.dtype not in DENSE:
            return f"hidden states of shape {tuple(x.shape)} dtype {x.dtype}"
        self._refresh(lm_head, x)
        if self._reason is None and self.head is not None and capturing(x.device) and not self.capturable():
            return ("the certified head over FP8 / NVFP4 rows synchronizes once per call, so it is not captured "
                    "in a CUDA graph (LOWBIT_VLLM_HEAD_MODE=fast is)")
        return self._reason

    def argmax(self, processor, lm_head, x: torch.Tensor, embedding_bias=None):
        reason = self._check(processor, lm_head, x, embedding_bias)
        if reason is not None:
            stats.fallback_once(reason)
        if reason is not None or self.head is None or x.numel() == 0:
            stats.count(draft_vllm_calls=1)
            return None
        ids = self.head.argmax(x)
        stats.count(draft_calls=1, draft_rows=ids.numel())
        return ids

    def _k_reason(self, k, x) -> str | None:
        """Why the built head does not answer top-``k`` here (None: it does)."""
        if self.head.mode == "certified" and k > CERTIFIED_MAX_K:
            return (f"top-k with k={k}: the certified head answers k <= {CERTIFIED_MAX_K} without a host "
                    "synchronization (CERTIFIED_MAX_K)")
        if k > self.head.max_k:
            return f"lowbit.DraftHead answers top-k up to k={self.head.max_k} ({self.head.mode} mode), not k={k}"
        if capturing(x.device) and k not in self._eager_ks:
            return (f"top-k with k={k} first called inside a CUDA-graph capture, where nothing may be compiled: "
                    "that graph keeps vLLM's path")
        return None

    def _warm_k(self, x, k: int) -> None:
        """First eager top-``k`` call of this head: on CUDA, run ``topk(., k)`` for every row count up
        to ``warmup_m`` (every launch configuration of this k compiled before a capture)."""
        if x.is_cuda and self.warmup_m > 0:
            for m in range(1, self.warmup_m + 1):
                self.head.topk(torch.randn(m, self.head.k, device=x.device, dtype=x.dtype), k)
            torch.cuda.synchronize(x.device)
        self._eager_ks.add(k)

    def topk(self, processor, lm_head, x: torch.Tensor, k, embedding_bias=None, *, log_probs: bool = False):
        """``(ids int64 [..., k], values fp32 [..., k])`` as vLLM's ``get_top_k_tokens`` returns them
        (without log-probs), or None to keep vLLM's path. ids: the exact top-k of ``x @ W[:V]^T``,
        descending, the lower index first among equal values; values: their exact fp32 logits
        rounded to the dtype vLLM's head computes in (``processor.head_dtype``, else x's), as fp32,
        times ``processor.scale`` when it is not 1, then soft-capped (``tanh(v / cap) * cap``) when
        the processor has a ``soft_cap`` -- what vLLM returns for the same ids (it too selects
        before capping)."""
        if log_probs:
            reason = ("top-k log-probs need the full-vocabulary log-partition, which the lowbit draft head "
                      "does not compute")
        elif not isinstance(k, int) or isinstance(k, bool) or k < 1:
            reason = f"top-k with k={k!r}: k must be a positive int"
        else:
            reason = self._check(processor, lm_head, x, embedding_bias, soft_cap_ok=True)
            if reason is None and self.head is not None:
                reason = self._k_reason(k, x)
        if reason is not None:
            stats.fallback_once(reason)
        if reason is not None or self.head is None or x.numel() == 0:
            stats.count(draft_topk_vllm_calls=1)
            return None
        if k not in self._eager_ks:
            self._warm_k(x, k)
        values, ids = self.head.topk(x, k)
        dtype = getattr(processor, "head_dtype", None) or x.dtype
        values = values.to(dtype).float()
        scale = getattr(processor, "scale", 1.0)
        if scale != 1.0:
            values = values * scale
        cap = getattr(processor, "soft_cap", None)
        if cap is not None:
            values = torch.tanh(values / cap) * cap
        stats.count(draft_topk_calls=1, draft_topk_rows=ids.numel() // k)
        return ids, values
