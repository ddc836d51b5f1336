"""The drafter's greedy token from a lowbit :class:`~lowbit.DraftHead` over vLLM's LM-head weight.

Engine-agnostic (no vLLM import): :class:`LazyDraftHead` reads duck-typed vLLM objects, a
``LogitsProcessor`` (``soft_cap``, ``scale``) and a ``ParallelLMHead`` (``weight [V_pad, K]``,
``tp_size``, ``shard_indices``, optionally ``weight_scale``), so its logic is tested without vLLM.

What it answers: ``argmax_v (x @ W[:V]^T)`` for ``x [..., K]`` -> int64 ``[...]``, V the
original vocabulary (padding rows excluded), exact in certified mode. Where lowbit does not apply
(:func:`unsupported`), or the weight is not loaded yet, it returns ``None`` and the caller keeps
vLLM's path.

The head is built lazily: vLLM builds modules on uninitialized storage and runs a profile pass
before (or without) real weights, so the weight is checked (finite, not all zeros: one host sync)
whenever its identity or version changes (:func:`lowbit.ops.coarse_head.weight_version`: storage
pointer, shape, strides, ``_version``; host-only) and a head is built once per loaded weight, with
one INFO log line naming its configuration. A head on CUDA is then warmed up
(:meth:`~lowbit.DraftHead.warmup`: every launch configuration compiled eagerly), so a later
CUDA-graph capture of the call (vLLM's FULL graphs capture the drafter's sampling) compiles
nothing. Inside a capture the call runs only where it has no host synchronization: a dense head,
or fast mode (the certified argmax over FP8 rows reads its fallback count back once per call).
"""
from __future__ import annotations

import torch

from lowbit.formats.fp8 import FP8
from lowbit.integrations.vllm import stats
from lowbit.ops.coarse_head import weight_version

_DENSE = (torch.bfloat16, torch.float16, torch.float32)
_CHUNK_ROWS = 8192  # rows per slice of the readiness scan (bounds its temporary memory)


def unsupported(processor, lm_head, embedding_bias) -> str | None:
    """Why lowbit cannot answer this processor's argmax (None if it can). Host-only checks."""
    if getattr(processor, "soft_cap", None) is not None:
        return "logit soft-capping (soft_cap) is not supported by the lowbit draft head"
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


def head_weight(lm_head):
    """``(weight, None)``: the lowbit view of the head's original-vocabulary rows (dense ``[V, K]``
    view, or :class:`~lowbit.formats.FP8` with row scales), or ``(None, reason)``.

    vLLM keeps FP8 heads as e4m3 ``weight`` ``[V_pad, K]`` (or its transposed view ``[K, V_pad]``)
    with ``weight_scale`` per row (``V_pad`` elements) or per tensor (one element, expanded to
    rows: ``V`` fp32 values copied). Other quantized layouts (NVFP4 with swizzled scales or Marlin
    repacking, integer packs, blocked FP8) are refused: their rows are not in a layout lowbit reads.
    """
    w = getattr(lm_head, "weight", None)
    if not isinstance(w, torch.Tensor) or w.dim() != 2:
        return None, f"the LM head has no 2-D weight tensor (got {type(w).__name__})"
    shards = getattr(lm_head, "shard_indices", None)
    k = getattr(lm_head, "embedding_dim", w.shape[1])
    rows = w.shape[0] if w.shape[1] == k else w.shape[1]
    n = shards.num_org_elements if shards is not None else rows
    if w.dtype in _DENSE:
        if w.shape[1] != k:
            return None, f"the LM-head weight has shape {tuple(w.shape)}, expected [V, {k}]"
        return w[:n], None
    if w.dtype == torch.float8_e4m3fn:
        if w.shape[1] == k and w.shape[0] != k:
            data = w
        elif w.shape[0] == k and w.shape[1] != k:
            data = w.t()
        else:
            return None, f"cannot tell the rows of the FP8 LM-head weight of shape {tuple(w.shape)}"
        if not data.is_contiguous():
            return None, "the FP8 LM-head weight's rows are not contiguous in memory"
        scale = getattr(lm_head, "weight_scale", None)
        if not isinstance(scale, torch.Tensor) or scale.dtype != torch.float32:
            return None, f"the FP8 LM head has no fp32 weight_scale (got {getattr(scale, 'dtype', type(scale).__name__)})"
        if scale.numel() == data.shape[0]:
            s = scale.reshape(-1, 1)[:n]
        elif scale.numel() == 1:
            s = scale.reshape(1, 1).expand(n, 1).contiguous()
        else:
            return None, (f"the FP8 LM head's weight_scale has {scale.numel()} elements; lowbit reads per-row "
                          f"({data.shape[0]}) or per-tensor scales")
        return FP8(data[:n], s, "row"), None
    return None, (f"the LM-head weight is {w.dtype} (quantization method "
                  f"{type(getattr(lm_head, 'quant_method', None)).__name__}): lowbit reads dense bf16 / fp16 / fp32 "
                  "or FP8 heads with row / tensor scales")


def tensor_key(t: torch.Tensor) -> tuple:
    """Identity + version of a tensor (host-only): :func:`~lowbit.ops.coarse_head.weight_version`,
    with the version left out for an inference-mode tensor (it has no version counter)."""
    try:
        return weight_version(t)
    except RuntimeError:
        return ((t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype,
                 str(t.device), None),)


def _raw_key(lm_head) -> tuple:
    tensors = [getattr(lm_head, "weight", None), getattr(lm_head, "weight_scale", None)]
    return tuple(tensor_key(t) for t in tensors if isinstance(t, torch.Tensor))


def weight_ready(weight) -> bool:
    """Finite and not all zeros (one host sync; scans in row slices)."""
    if isinstance(weight, FP8):
        parts = [(d.float() * s).abs().amax() for d, s in
                 zip(weight.data.split(_CHUNK_ROWS), weight.scale.split(_CHUNK_ROWS))]
    else:
        parts = [c.abs().amax().float() for c in weight.split(_CHUNK_ROWS)]
    m = float(torch.stack(parts).amax()) if parts else 0.0
    return 0.0 < m < float("inf")  # False for NaN too


def describe(head, role: str) -> str:
    w = head.weight
    kind = "fp8-row" if isinstance(w, FP8) else str(w.dtype).replace("torch.", "")
    return f"DraftHead for the {role} LM head ({kind} weight): {head.extra_repr()}"


class LazyDraftHead:
    """A :class:`~lowbit.DraftHead` over one vLLM LM head, built once per loaded weight.

    ``argmax(processor, lm_head, x, embedding_bias)`` -> int64 ``[...]`` for ``x [..., K]``, or
    ``None`` to keep vLLM's path (the reason logged once per process). ``head_kwargs``:
    :class:`~lowbit.DraftHead` arguments; ``warmup_m``: rows a CUDA head is warmed up for when
    built (0: none). Counts go to :mod:`stats`.
    """

    def __init__(self, head_kwargs: dict, role: str = "drafter", warmup_m: int = 64):
        self.head_kwargs = dict(head_kwargs)
        self.role = role
        self.warmup_m = warmup_m
        self.head = None
        self._key = None  # raw weight key the current state was made for
        self._weight = None
        self._reason = None  # why this weight cannot be used (None: usable or not loaded yet)

    def _refresh(self, lm_head, x) -> None:
        key = _raw_key(lm_head)
        if key == self._key:
            return
        if x.is_cuda and torch.cuda.is_current_stream_capturing():
            self._reason = "the LM-head weight changed during CUDA-graph capture (no check or build possible there)"
            return  # _key unchanged: checked again on the next eager call
        self._key, self.head, self._reason = key, None, None
        weight, self._reason = head_weight(lm_head)
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
        stats.built(describe(head, self.role) + warm)

    def capturable(self) -> bool:
        """Whether the built head's argmax has no host synchronization (CUDA-graph safe)."""
        return self.head is not None and (self.head.mode == "fast" or isinstance(self.head.weight, torch.Tensor))

    def argmax(self, processor, lm_head, x: torch.Tensor, embedding_bias=None):
        reason = unsupported(processor, lm_head, embedding_bias)
        if reason is None:
            if x.dim() < 1 or x.dtype not in _DENSE:
                reason = f"hidden states of shape {tuple(x.shape)} dtype {x.dtype}"
            else:
                self._refresh(lm_head, x)
                reason = self._reason
                if (reason is None and self.head is not None and x.is_cuda
                        and torch.cuda.is_current_stream_capturing() and not self.capturable()):
                    reason = ("the certified argmax over an FP8 head synchronizes once per call, so it is not "
                              "captured in a CUDA graph (LOWBIT_VLLM_HEAD_MODE=fast is)")
        if reason is not None:
            stats.fallback_once(reason)
        if reason is not None or self.head is None or x.numel() == 0:
            stats.count("draft_vllm_calls")
            return None
        ids = self.head.argmax(x)
        stats.count("draft_calls")
        stats.count("draft_rows", ids.numel())
        return ids
