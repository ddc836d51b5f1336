"""How vLLM layers hold their weights, read as lowbit weights without copies.

No vLLM import: layers are duck-typed by the attributes vLLM 0.32 sets. Each reader returns
``(weight, None)`` or ``(None, reason)``; the reason says what was seen and what lowbit reads.

* Dense ``weight`` ``[V_pad, K]`` bf16 / fp16 / fp32 -> its first ``V`` rows (a view).
* FP8: e4m3 ``weight`` ``[V_pad, K]`` or its transposed view ``[K, V_pad]``, fp32
  ``weight_scale`` per row (``V_pad`` elements) or per tensor (one, expanded: V fp32 values made)
  -> :class:`~lowbit.formats.FP8` with row scales.
* NVFP4 (ModelOpt, a multiplier global scale), only where vLLM keeps the linear layout:
  the buffers it retains for the DSpark gather (``_nvfp4_weight_for_gather`` uint8 ``[V_pad, K/2]``,
  ``_nvfp4_weight_scale_for_gather`` e4m3 ``[V_pad, K/16]``, ``_nvfp4_weight_global_scale_for_gather``
  one element), or a layer run by vLLM's ``EmulationNvFp4LinearKernel`` (``weight``,
  ``weight_scale``, ``weight_global_scale`` as loaded) -> :class:`~lowbit.formats.NVFP4` (the
  global scale viewed as 0-d). vLLM's other NVFP4 kernels swizzle the scales or repack the weight
  (Marlin) for their GEMMs: refused.
"""
from __future__ import annotations

import torch

from lowbit.formats.fp8 import FP8
from lowbit.formats.nvfp4 import NVFP4
from lowbit.ops.coarse_head import weight_version

DENSE = (torch.bfloat16, torch.float16, torch.float32)
#: vLLM's NVFP4 linear kernel that keeps ModelOpt's linear layout (dequantize + matmul)
LINEAR_NVFP4_KERNELS = ("EmulationNvFp4LinearKernel",)


def tensor_key(t: torch.Tensor) -> tuple:
    """Identity + version of a tensor (host-only): :func:`~lowbit.ops.coarse_head.weight_version`,
    with the version left out for an inference-mode tensor (it has no version counter)."""
    try:
        return weight_version(t)
    except RuntimeError:
        return ((t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype,
                 str(t.device), None),)


def nvfp4_tensors(layer):
    """``(packed, scale, global_scale, group_size)`` of a layer whose NVFP4 weight vLLM keeps in
    the linear layout, else None."""
    if getattr(layer, "_retain_weight_for_gather", False) and getattr(layer, "is_w4a16_nvfp4", False):
        return (layer._nvfp4_weight_for_gather, layer._nvfp4_weight_scale_for_gather,
                layer._nvfp4_weight_global_scale_for_gather, getattr(layer, "_nvfp4_group_size_for_gather", 16))
    kernel = getattr(getattr(layer, "quant_method", None), "kernel", None)
    if type(kernel).__name__ in LINEAR_NVFP4_KERNELS and hasattr(layer, "weight_global_scale"):
        return layer.weight, layer.weight_scale, layer.weight_global_scale, 16
    return None


def nvfp4(packed, scale, global_scale, group_size, rows: int):
    """The first ``rows`` rows of a ModelOpt NVFP4 weight as :class:`~lowbit.formats.NVFP4` (views)."""
    if group_size != 16:
        return None, f"NVFP4 weight with group size {group_size} (lowbit's NVFP4 has 16)"
    if not isinstance(global_scale, torch.Tensor) or global_scale.numel() != 1 or global_scale.dtype != torch.float32:
        return None, (f"NVFP4 global scale of shape {tuple(getattr(global_scale, 'shape', ()))} dtype "
                      f"{getattr(global_scale, 'dtype', type(global_scale).__name__)} (lowbit reads one fp32 element)")
    if isinstance(scale, torch.Tensor) and scale.dtype == torch.uint8:
        scale = scale.view(torch.float8_e4m3fn)
    if rows > packed.shape[0]:
        return None, f"{rows} rows asked of an NVFP4 weight with {packed.shape[0]}"
    try:
        return NVFP4(packed[:rows], scale[:rows], global_scale.reshape(()), 16), None
    except ValueError as e:
        return None, f"NVFP4 tensors lowbit cannot read: {e}"


def lm_head_weight(lm_head):
    """The original-vocabulary rows of a vLLM ``ParallelLMHead`` (``weight``, ``embedding_dim``,
    ``shard_indices.num_org_elements``; ``weight_scale`` for FP8) as a lowbit weight."""
    w = getattr(lm_head, "weight", None)
    if not isinstance(w, torch.Tensor) or w.dim() != 2:
        return None, f"the LM head has no 2-D weight tensor (got {type(w).__name__})"
    shards = getattr(lm_head, "shard_indices", None)
    k = getattr(lm_head, "embedding_dim", w.shape[1])
    nv = nvfp4_tensors(lm_head)
    if nv is not None:
        n = shards.num_org_elements if shards is not None else nv[0].shape[0]
        return nvfp4(*nv, rows=n)
    rows = w.shape[0] if w.shape[1] == k else w.shape[1]
    n = shards.num_org_elements if shards is not None else rows
    if w.dtype in DENSE:
        if w.shape[1] != k:
            return None, f"the LM-head weight has shape {tuple(w.shape)}, expected [V, {k}]"
        return w[:n], None
    if w.dtype == torch.float8_e4m3fn:
        return _fp8_rows(lm_head, w, k, n)
    return None, (f"the LM-head weight is {w.dtype} (quantization method "
                  f"{type(getattr(lm_head, 'quant_method', None)).__name__}): lowbit reads dense bf16 / fp16 / fp32, "
                  "FP8 with row / tensor scales, or NVFP4 in the linear layout")


def _fp8_rows(lm_head, w, k, n):
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


def markov_w2_weight(w2, vocab: int):
    """The first ``vocab`` rows of a DSpark ``markov_w2`` (a ``ParallelLMHead`` whose rows vLLM pads
    to a multiple of 64): the retained NVFP4 buffers, else a dense ``weight``."""
    nv = nvfp4_tensors(w2)
    if nv is not None:
        return nvfp4(*nv, rows=vocab)
    w = getattr(w2, "weight", None)
    if isinstance(w, torch.Tensor) and w.dim() == 2 and w.dtype in DENSE:
        if vocab > w.shape[0]:
            return None, f"logits have {vocab} columns but markov_w2 has {w.shape[0]} rows"
        return w[:vocab], None
    return None, (f"markov_w2 weight {getattr(w, 'dtype', type(w).__name__)} (lowbit reads dense bf16 / fp16 / fp32 "
                  "or the retained NVFP4 buffers)")


def key_tensors(layer) -> tuple:
    """The tensors whose identity and version decide whether a cached weight view is current."""
    nv = nvfp4_tensors(layer)
    names = nv[:3] if nv is not None else (getattr(layer, "weight", None), getattr(layer, "weight_scale", None))
    return tuple(t for t in names if isinstance(t, torch.Tensor))
