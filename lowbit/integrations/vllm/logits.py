"""vLLM's ``LogitsProcessor`` with the drafter's ``get_top_tokens`` answered by lowbit.

Imports vLLM. :func:`install` registers :class:`LowbitLogitsProcessor` as vLLM's out-of-tree
replacement of ``LogitsProcessor`` (``PluggableLayer.register_oot``), so every plain
``LogitsProcessor`` vLLM builds is one of these; model-specific subclasses are left alone.

Which processor is the drafter's is decided at construction: vLLM builds a drafter (draft model,
EAGLE, MTP, Medusa, DFlash, DSpark heads) under a model tag other than ``"backbone"``
(``vllm.compilation.backends.set_model_tag``). The target model's processor is untouched. Only
``get_top_tokens`` (the drafter's greedy token when the speculative config sets
``use_local_argmax_reduction: True``) and ``get_top_k_tokens`` without log-probs (the candidates of
top-k drafters such as DFlash2) change; ``forward`` / full logits stay vLLM's.
"""
from __future__ import annotations

import torch
from vllm.model_executor.custom_op import op_registry_oot
from vllm.model_executor.layers.logits_processor import LogitsProcessor

from lowbit.integrations.vllm import stats
from lowbit.integrations.vllm.config import settings
from lowbit.integrations.vllm.head import LazyDraftHead

TARGET_TAG = "backbone"


def model_tag() -> str:
    """The tag of the model vLLM is building now ("backbone" for the target)."""
    from vllm.compilation import backends

    return backends.model_tag


def _uses_local_argmax() -> bool | None:
    try:
        from vllm.config import get_current_vllm_config

        spec = get_current_vllm_config().speculative_config
    except Exception:  # no config in scope (a processor built outside vLLM's model loading)
        return None
    return None if spec is None else bool(getattr(spec, "use_local_argmax_reduction", False))


class LowbitLogitsProcessor(LogitsProcessor):
    """A ``LogitsProcessor`` whose drafter argmax (``get_top_tokens``) and top-k
    (``get_top_k_tokens`` without log-probs) come from a lowbit :class:`~lowbit.DraftHead` over the
    LM-head weight (see :mod:`.head`)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        tag = model_tag()
        s = settings()
        self.lowbit_role = None if tag == TARGET_TAG else f"drafter ({tag})"
        self.lowbit_head = None
        if s.draft and self.lowbit_role:
            self.lowbit_head = LazyDraftHead(s.head_kwargs, self.lowbit_role, s.warmup_m)
        if self.lowbit_head is not None and _uses_local_argmax() is False:
            stats.fallback_once("the drafter's greedy token comes from compute_logits().argmax unless the "
                                "speculative config sets use_local_argmax_reduction: True; the lowbit head "
                                "answers get_top_tokens (and a top-k drafter's get_top_k_tokens) only")

    def get_top_tokens(self, lm_head, hidden_states: torch.Tensor, embedding_bias=None) -> torch.Tensor:
        if self.lowbit_head is not None:
            ids = self.lowbit_head.argmax(self, lm_head, hidden_states, embedding_bias)
            if ids is not None:
                return ids
        return super().get_top_tokens(lm_head, hidden_states, embedding_bias)

    def get_top_k_tokens(self, lm_head, hidden_states: torch.Tensor, k: int, embedding_bias=None, *,
                         return_log_probs: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        if self.lowbit_head is not None:
            out = self.lowbit_head.topk(self, lm_head, hidden_states, k, embedding_bias, log_probs=return_log_probs)
            if out is not None:
                return out
        return super().get_top_k_tokens(lm_head, hidden_states, k, embedding_bias, return_log_probs=return_log_probs)


def install() -> bool:
    """Register :class:`LowbitLogitsProcessor` (idempotent). False, with the reason logged, when
    another plugin already replaced ``LogitsProcessor``."""
    current = op_registry_oot.get(LogitsProcessor.__name__)
    if current is LowbitLogitsProcessor:
        return True
    if current is not None:
        stats.fallback_once(f"LogitsProcessor is already replaced by {current.__module__}.{current.__qualname__}")
        return False
    LogitsProcessor.register_oot(LowbitLogitsProcessor)
    return True
