"""Pure-PyTorch top-k sparse attention with an attention sink (the spec, and the CPU path).

This is the path a user writes: gather the selected KV rows, score them, masked softmax with
the sink as one extra value-less logit, weighted sum. It is also the benchmark baseline.
"""
from __future__ import annotations

import torch

# Bound the gathered [b, chunk, topk, d] block (in elements) so prefill-sized calls
# (m = 4096, topk = 2048, d = 512 would be 8 GB of fp32 rows) run in pieces.
_MAX_GATHER_ELEMS = 1 << 28


def dequant_kv_rows(rows: torch.Tensor, scale_rows: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
    """KV rows ``[..., d]`` to ``dtype``; FP8 rows are multiplied by their group scales ``[..., d/G]``."""
    if scale_rows is None:
        return rows.to(dtype)
    group = rows.shape[-1] // scale_rows.shape[-1]
    return rows.to(dtype) * scale_rows.to(dtype).repeat_interleave(group, dim=-1)


def sparse_attn_reference(
    q: torch.Tensor,
    kv: torch.Tensor,
    attn_sink: torch.Tensor,
    topk_idxs: torch.Tensor,
    softmax_scale: float,
    kv_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """o[b, m, h, :] = sum_j p[j] * kv[b, idx[b, m, j], :] with
    ``p = softmax([s_0 .. s_{topk-1}, sink[h]])[:topk]`` and ``s_j = softmax_scale * q . kv[idx_j]``.

    q [b, m, h, d]; kv [b, n, d] (bf16/fp32, or e4m3 with ``kv_scale`` [b, n, d/G]); attn_sink [h];
    topk_idxs [b, m, topk] int32/int64. Indices outside ``[0, n)`` (e.g. -1) contribute nothing;
    every occurrence of a duplicated index counts. A row with no valid index returns zeros,
    whatever the sink. A NaN sink gives NaN on every other row of its head; a +inf sink takes all
    the weight (zeros); a -inf sink is no sink. Computes in fp32 (fp64 when q is fp64, for tests); returns q's dtype.
    """
    b, m, h, d = q.shape
    n = kv.shape[1]
    topk = topk_idxs.shape[-1]
    cdt = torch.float64 if q.dtype == torch.float64 else torch.float32
    out = torch.empty(b, m, h, d, dtype=q.dtype, device=q.device)
    if m == 0 or h == 0:
        return out
    if n == 0 or topk == 0:  # no row can be valid: zeros (and nothing to gather from)
        return out.zero_()
    idx = topk_idxs.long()
    valid = (idx >= 0) & (idx < n)
    safe = torch.where(valid, idx, torch.zeros_like(idx))
    sink = attn_sink.to(cdt).view(1, 1, h, 1)
    batch = torch.arange(b, device=q.device).view(b, 1, 1)
    chunk = max(1, _MAX_GATHER_ELEMS // max(1, b * topk * d))
    for m0 in range(0, m, chunk):
        sl = slice(m0, min(m, m0 + chunk))
        rows = dequant_kv_rows(
            kv[batch, safe[:, sl]], None if kv_scale is None else kv_scale[batch, safe[:, sl]], cdt
        )  # [b, mc, topk, d]
        scores = torch.einsum("bmhd,bmtd->bmht", q[:, sl].to(cdt), rows) * softmax_scale
        scores = scores.masked_fill(~valid[:, sl, None, :], float("-inf"))
        logits = torch.cat([scores, sink.expand(b, scores.shape[1], h, 1)], dim=-1)
        p = torch.softmax(logits, dim=-1)[..., :topk]
        # A row with no valid index is zeros whatever the sink (softmax gives NaN for a -inf or
        # NaN sink there); a +inf sink takes all the weight (softmax gives NaN: inf - inf). A NaN
        # sink on a row with a valid index stays NaN, as does a NaN score.
        has_row = valid[:, sl].any(-1)[:, :, None, None]
        p = torch.where(has_row & (sink != float("inf")), p, torch.zeros((), dtype=p.dtype, device=p.device))
        out[:, sl] = torch.einsum("bmht,bmtd->bmhd", p, rows).to(q.dtype)
    return out
