"""The DSpark Markov head's gathered correction through :func:`lowbit.ops.gathered_bias`.

vLLM's ``DSparkMarkovHead.apply_bias_gathered(markov_embed [B, r], logits [B, V], values [B, T],
index [B, T] int64, scale)`` writes ``logits[b, index[b,t]] = values[b,t] + scale *
dot(markov_embed[b], W2[index[b,t]])`` and returns ``logits``. vLLM runs its own kernel only for
ModelOpt W4A16 NVFP4 ``markov_w2`` with bf16 tensors on CUDA; elsewhere it dequantizes the selected
rows, runs ``baddbmm_`` and scatters. :func:`apply_bias_gathered` computes the same with one
:func:`~lowbit.ops.gathered_bias` call on every device and dtype (fp32 math, one rounding to
``logits.dtype``).

Weights read, without copies (:func:`markov_weight`, :func:`.weights.markov_w2_weight`):

* NVFP4: the buffers vLLM retains for the gather, ``markov_w2._nvfp4_weight_for_gather`` uint8
  ``[V, r/2]`` (two E2M1 codes per byte, low nibble first), ``_nvfp4_weight_scale_for_gather`` e4m3
  ``[V, r/16]`` (linear layout) and ``_nvfp4_weight_global_scale_for_gather`` (a multiplier, one
  element) -> :class:`~lowbit.formats.NVFP4` (the global scale viewed as 0-d).
* dense: ``markov_w2.weight`` ``[V, r]`` bf16 / fp16 / fp32 (any of them, whatever the activation
  dtype; vLLM's path needs the weight in the activation dtype).

vLLM pads ``markov_w2``'s rows to a multiple of 64; the first ``logits.shape[1]`` rows are read.

CUDA-graph safe: no host synchronization and no branch on tensor values (the checks read shapes,
dtypes, devices and host attributes only; the format object is cached per buffer identity).
No vLLM import: ``module`` is duck-typed (``markov_w2`` and the attributes above).
"""
from __future__ import annotations

import torch

from lowbit.formats.nvfp4 import NVFP4
from lowbit.integrations.vllm import stats
from lowbit.integrations.vllm.weights import DENSE, key_tensors, markov_w2_weight, tensor_key
from lowbit.ops.gathered import gathered_bias

_CACHE_ATTR = "_lowbit_markov_weight"  # (key, weight, reason) cached on the markov_w2 module


def markov_weight(module, vocab: int):
    """``(weight, None)``: the lowbit weight of ``module.markov_w2``'s first ``vocab`` rows (dense
    view or NVFP4 over vLLM's buffers, no copy; vLLM pads the rows to a multiple of 64), or
    ``(None, reason)``. Cached per buffer identity, version and ``vocab``."""
    w2 = module.markov_w2
    key = (vocab, *(tensor_key(t) for t in key_tensors(w2)))
    cached = getattr(w2, _CACHE_ATTR, None)
    if cached is None or cached[0] != key:
        cached = (key, *markov_w2_weight(w2, vocab))
        object.__setattr__(w2, _CACHE_ATTR, cached)  # a plain attribute, not a registered buffer
    return cached[1], cached[2]


def unsupported(weight, markov_embed, logits, values, index, scale) -> str | None:
    """Why :func:`gathered_bias` cannot serve this call (None if it can). Host-only checks."""
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        return f"Markov scale of type {type(scale).__name__} (lowbit takes a Python number)"
    for name, t in (("markov_embed", markov_embed), ("logits", logits), ("values", values)):
        if not isinstance(t, torch.Tensor) or t.dtype not in DENSE or t.dim() != 2:
            return f"{name} {getattr(t, 'dtype', type(t).__name__)} of shape {tuple(getattr(t, 'shape', ()))}"
    if not isinstance(index, torch.Tensor) or index.dtype not in (torch.int32, torch.int64):
        return f"index of dtype {getattr(index, 'dtype', type(index).__name__)}"
    data = weight.packed if isinstance(weight, NVFP4) else weight
    devices = {t.device for t in (data, markov_embed, logits, values, index)}
    if len(devices) > 1:
        return f"tensors on several devices ({sorted(map(str, devices))})"
    return None


def apply_bias_gathered(module, markov_embed, logits, values, index, scale=1.0, fallback=None):
    """``DSparkMarkovHead.apply_bias_gathered`` through lowbit; returns ``logits`` (mutated in
    place at ``index``; nothing else is mutated). ``fallback(module, markov_embed, logits, values,
    index, scale)`` (vLLM's own method) runs where lowbit does not apply, the reason logged once."""
    reason = None
    if not isinstance(logits, torch.Tensor) or logits.dim() != 2:
        reason = f"logits of shape {tuple(getattr(logits, 'shape', ()))}"
    else:
        weight, reason = markov_weight(module, logits.shape[1])
    if reason is None:
        reason = unsupported(weight, markov_embed, logits, values, index, scale)
    if reason is not None:
        stats.fallback_once(f"DSpark Markov head: {reason}")
        if fallback is None:
            raise ValueError(f"lowbit cannot apply the Markov bias: {reason}")
        stats.count(markov_vllm_calls=1)
        return fallback(module, markov_embed, logits, values, index, scale)
    gathered_bias(markov_embed, weight, values, index, logits, float(scale))
    stats.count(markov_calls=1)
    return logits


def install() -> bool:
    """Replace ``DSparkMarkovHead.apply_bias_gathered`` in vLLM (idempotent; imports vLLM's
    DSpark model module). False, with the reason logged, if vLLM has no such class."""
    try:
        from vllm.model_executor.models.qwen3_dspark import DSparkMarkovHead
    except ImportError as e:
        stats.fallback_once(f"DSpark Markov head: vLLM's qwen3_dspark module is not importable ({e})")
        return False
    original = DSparkMarkovHead.apply_bias_gathered
    if getattr(original, "_lowbit", False):
        return True

    def lowbit_apply_bias_gathered(self, markov_embed, logits, values, index, scale=1.0):
        return apply_bias_gathered(self, markov_embed, logits, values, index, scale, fallback=original)

    lowbit_apply_bias_gathered._lowbit = True
    lowbit_apply_bias_gathered.__doc__ = apply_bias_gathered.__doc__
    lowbit_apply_bias_gathered.vllm_original = original
    DSparkMarkovHead.apply_bias_gathered = lowbit_apply_bias_gathered
    return True
