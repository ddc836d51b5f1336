"""lowbit inside vLLM: a ``vllm.general_plugins`` plugin (reference: docs/vllm.md).

:func:`register` is the entry point vLLM calls in every process before it builds a model. It does
nothing unless ``LOWBIT_VLLM`` is set:

* ``LOWBIT_VLLM=draft``: the drafter's greedy token (``LogitsProcessor.get_top_tokens``, used when
  the speculative config sets ``use_local_argmax_reduction: True``) comes from a lowbit
  :class:`~lowbit.DraftHead` over the drafter's LM-head weight (:mod:`.logits`, :mod:`.head`);
  plus the Markov-head adapter below.
* ``LOWBIT_VLLM=markov``: only the DSpark Markov-head adapter: ``DSparkMarkovHead.apply_bias_gathered``
  runs :func:`lowbit.ops.gathered_bias` (:mod:`.markov`).

Settings: :mod:`.config`; call counts: :mod:`.stats`. Importing this package imports no vLLM.
"""
from __future__ import annotations


def register() -> None:
    """The plugin entry point: validate the settings (``ValueError`` naming a bad variable) and
    install what ``LOWBIT_VLLM`` asks for. Safe to call more than once per process."""
    from lowbit.integrations.vllm.config import settings

    s = settings()
    if s.draft:
        from lowbit.integrations.vllm import logits

        logits.install()
    if s.markov:
        from lowbit.integrations.vllm import markov

        markov.install()
