"""``lowbit.ops.hc_split_sinkhorn``: split hyper-connection mixes into pre / post weights and a
(nearly) doubly-stochastic residual mixing matrix by Sinkhorn normalisation.

The Triton kernel lives in ``triton.py``; ``reference.py`` is the spec.
"""
from __future__ import annotations

import torch

from lowbit._backend import use_triton
from lowbit._validate import check_same_device, check_tensor, require
from lowbit.ops.hc_sinkhorn.reference import hc_split_sinkhorn_reference

__all__ = ["hc_split_sinkhorn", "hc_split_sinkhorn_reference", "MAX_HC"]

MAX_HC = 16


def _validate(mixes, hc_scale, hc_base, hc_mult, sinkhorn_iters, eps) -> None:
    require(isinstance(hc_mult, int) and not isinstance(hc_mult, bool) and 1 <= hc_mult <= MAX_HC,
            f"hc_mult must be an int in [1, {MAX_HC}], got {hc_mult!r}")
    require(isinstance(sinkhorn_iters, int) and not isinstance(sinkhorn_iters, bool) and sinkhorn_iters >= 1,
            f"sinkhorn_iters must be an int >= 1, got {sinkhorn_iters!r}")
    require(isinstance(eps, (int, float)) and not isinstance(eps, bool) and eps >= 0,
            f"eps must be a non-negative float, got {eps!r}")
    width = (2 + hc_mult) * hc_mult
    check_tensor("mixes", mixes, dtypes=(torch.float32,), ndim=3)
    check_tensor("hc_scale", hc_scale, dtypes=(torch.float32,), ndim=1)
    check_tensor("hc_base", hc_base, dtypes=(torch.float32,), ndim=1)
    require(mixes.shape[-1] == width,
            f"mixes must be [b, s, (2+hc)*hc={width}] for hc_mult={hc_mult}, got {tuple(mixes.shape)}")
    require(tuple(hc_scale.shape) == (3,), f"hc_scale must be [3], got {tuple(hc_scale.shape)}")
    require(tuple(hc_base.shape) == (width,), f"hc_base must be [{width}] for hc_mult={hc_mult}, got {tuple(hc_base.shape)}")
    check_same_device(mixes=mixes, hc_scale=hc_scale, hc_base=hc_base)


def _impl(mixes, hc_scale, hc_base, hc_mult, sinkhorn_iters, eps):
    if use_triton(mixes, hc_scale, hc_base):
        from lowbit.ops.hc_sinkhorn.triton import hc_split_sinkhorn_triton

        return hc_split_sinkhorn_triton(mixes, hc_scale, hc_base, hc_mult, sinkhorn_iters, eps)
    return hc_split_sinkhorn_reference(mixes, hc_scale, hc_base, hc_mult, sinkhorn_iters, eps)


@torch.library.custom_op("lowbit::hc_split_sinkhorn", mutates_args=())
def _hc_split_sinkhorn_op(
    mixes: torch.Tensor,
    hc_scale: torch.Tensor,
    hc_base: torch.Tensor,
    hc_mult: int,
    sinkhorn_iters: int,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _impl(mixes, hc_scale, hc_base, hc_mult, sinkhorn_iters, eps)


@_hc_split_sinkhorn_op.register_fake
def _(mixes, hc_scale, hc_base, hc_mult, sinkhorn_iters, eps):
    b, s, _ = mixes.shape
    return (mixes.new_empty(b, s, hc_mult), mixes.new_empty(b, s, hc_mult), mixes.new_empty(b, s, hc_mult, hc_mult))


def hc_split_sinkhorn(
    mixes: torch.Tensor,
    hc_scale: torch.Tensor,
    hc_base: torch.Tensor,
    hc_mult: int = 4,
    sinkhorn_iters: int = 20,
    eps: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Hyper-connection split with Sinkhorn normalisation. Returns new tensors; nothing is mutated.

    mixes [b, s, (2+hc)*hc] fp32 (hc = hc_mult), hc_scale [3] fp32, hc_base [(2+hc)*hc] fp32.
    Per (b, s) row, with ``x = mixes[b, s]``:

    * ``pre [b, s, hc]  = sigmoid(x[:hc] * hc_scale[0] + hc_base[:hc]) + eps``
    * ``post [b, s, hc] = 2 * sigmoid(x[hc:2hc] * hc_scale[1] + hc_base[hc:2hc])``
    * ``comb [b, s, hc, hc]``: ``x[2hc:].view(hc, hc) * hc_scale[2] + hc_base[2hc:]`` (row-major),
      row-softmax + eps, column-normalise ``c / (colsum + eps)``, then ``sinkhorn_iters - 1`` times
      {row-normalise, column-normalise}: a nearly doubly-stochastic mixing matrix.

    All fp32. One fused kernel on CUDA; the matrices stay in registers.
    """
    _validate(mixes, hc_scale, hc_base, hc_mult, sinkhorn_iters, eps)
    eps = float(eps)
    if torch.compiler.is_compiling():
        return _hc_split_sinkhorn_op(mixes, hc_scale, hc_base, hc_mult, sinkhorn_iters, eps)
    # Eager: skip the custom-op dispatcher, whose overhead exceeds this kernel's run time.
    return _impl(mixes, hc_scale, hc_base, hc_mult, sinkhorn_iters, eps)
