"""The draft head's coarse pass as one op: validation, the route of :mod:`.dispatch`, the launch.

Registered op: ``torch.ops.lowbit.coarse_head`` (``custom_op`` + ``register_fake``, mutates
nothing), so the pass compiles with ``torch.compile(fullgraph=True)``; eager calls skip the op
wrapper (several µs of Python at M = 1).
"""
from __future__ import annotations

import torch

from lowbit._backend import use_triton
from lowbit._validate import check_tensor, require
from lowbit.ops.coarse_head import dispatch
from lowbit.ops.coarse_head.packing import KIND_INTX, CoarsePacking, raw_tensors
from lowbit.ops.coarse_head.reference import BOUND_DET, BOUND_NONE, BOUND_STAT, CoarseOut, coarse_head_reference
from lowbit.ops.coarse_head.wgmma_pack import TABLE_BITS

_X_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
#: the coarse kernels by route id (the op's ``route`` argument)
_ROUTES = tuple(r.kernel for r in dispatch.COARSE_ROUTES)


def _sm90(device: torch.device) -> bool:
    from lowbit.ops.coarse_head.wgmma_int8 import wgmma_available

    return wgmma_available(device)


def call_of(packing: CoarsePacking, x: torch.Tensor, bound: int, block: int, compiling: bool) -> dispatch.CoarseCall:
    """The :class:`~.dispatch.CoarseCall` of a call on the Triton path. Under torch.compile a
    kernel-specific tiling of the codes counts only if it already exists (``DraftHead.warmup``
    builds it eagerly): building one is not part of a traced call, and the device query is not
    traced either (a wgmma tiling exists only where an eager call found an sm_90 GPU)."""
    intx = packing.kind == KIND_INTX
    ell = packing.fmt.packed.shape[1] if intx else packing.k
    table = intx and packing.bits in TABLE_BITS
    return dispatch.CoarseCall(
        kind=packing.kind, bits=packing.bits, group_size=packing.group_size, ell=ell, m=x.shape[0], bound=bound,
        block=block, sm90=compiling or (intx and bound == BOUND_NONE and _sm90(x.device)),
        aligned=packing.words_aligned,
        tiling_mma=not compiling or packing._mma is not None,
        tiling_wgmma=not compiling or (packing._wgmma_table if table else packing._wgmma) is not None)


def _operands(route: str, packing: CoarsePacking):
    """(w, s, z, gs) in the op's argument slots for the route: the stored tensors, or the route's
    own tiling of the INTx codes (built on first use, kept by the packing)."""
    w, s, z, gs = raw_tensors(packing)
    if route == "wgmma_int8":
        if packing.bits in TABLE_BITS:
            s, z = packing.wgmma_table()  # int32 words, fp32 row units
        else:
            s = z = packing.wgmma_words()
    elif route == "mma_f16":
        w, s = packing.mma_tiled()
        z = s
    return w, s, z, gs


def coarse_head(x: torch.Tensor, packing: CoarsePacking, *, block: int = 128, kcand: int = 4,
                bound: int = BOUND_NONE, sigma: float = 4.0, write_logits: bool = False) -> CoarseOut:
    """The fused coarse pass over ``x [M, K]`` (bf16 / fp16 / fp32). See :class:`CoarseOut`.

    ``bound``: BOUND_NONE (fast: key = coarse logit), BOUND_DET or BOUND_STAT (certified: key =
    upper bound, plus lower bounds and each block's best unemitted key). ``block`` tokens per
    candidate block (a power of two, 16..256), ``kcand`` candidates per block (1..block).
    Triton for CUDA tensors (the kernel :func:`~.dispatch.coarse_route` picks), the reference
    otherwise (``lowbit._backend``). Nothing is mutated.

    Scale: an INTx packing with ``packing.coarse_exp = e > 0`` (a head whose group scales do not
    fit fp16 unscaled) is quantized from ``W * 2^-e``; every float output (keys, lower bounds,
    block maxima, logits) is scaled back by ``2^e`` here, exactly (a power of two), so the outputs
    are always in the weight's own units. The draft head's pipelines use
    :func:`coarse_head_scaled` (the unscaled-back values; they only compare keys among themselves).
    """
    out = coarse_head_scaled(x, packing, block=block, kcand=kcand, bound=bound, sigma=sigma,
                             write_logits=write_logits)
    return unscale(out, packing)


def unscale_tensor(t: torch.Tensor, packing: CoarsePacking) -> torch.Tensor:
    """A coarse value of the scaled domain times ``2^packing.coarse_exp`` (exact; ``t`` itself when 0)."""
    e = getattr(packing, "coarse_exp", 0)
    return t if not e else t * (2.0**e)


def unscale(out: CoarseOut, packing: CoarsePacking) -> CoarseOut:
    """:func:`coarse_head_scaled`'s outputs in the weight's units (see :func:`coarse_head`)."""
    if not getattr(packing, "coarse_exp", 0):
        return out
    return CoarseOut(unscale_tensor(out.cand_key, packing), unscale_tensor(out.cand_lb, packing), out.cand_idx,
                     unscale_tensor(out.block_lb, packing), unscale_tensor(out.block_rest, packing),
                     unscale_tensor(out.logits, packing))


def coarse_head_scaled(x: torch.Tensor, packing: CoarsePacking, *, block: int = 128, kcand: int = 4,
                       bound: int = BOUND_NONE, sigma: float = 4.0, write_logits: bool = False) -> CoarseOut:
    """:func:`coarse_head` without the scaling back: the float outputs are ``2^-packing.coarse_exp``
    times the weight's units (identical when ``coarse_exp`` is 0, the usual case)."""
    check_tensor("x", x, dtypes=_X_DTYPES, ndim=2)
    require(x.shape[1] == packing.k, f"x has K={x.shape[1]} (shape {tuple(x.shape)}), the head has K={packing.k}")
    compiling = torch.compiler.is_compiling()
    require(compiling or x.device == packing.device, f"x is on {x.device}, the coarse weight on {packing.device}")
    require(isinstance(block, int) and 16 <= block <= 256 and block & (block - 1) == 0,
            f"block must be a power of two in [16, 256], got {block}")
    require(isinstance(kcand, int) and 1 <= kcand <= block, f"kcand must be in [1, block={block}], got {kcand}")
    require(bound in (BOUND_NONE, BOUND_DET, BOUND_STAT), f"bound must be 0, 1 or 2, got {bound}")
    require(not (bound == BOUND_STAT and packing.bits is None),
            "the statistical bound needs an INTx coarse copy (native rows have no quantization error)")
    require(x.shape[0] > 0, f"x has no rows (shape {tuple(x.shape)})")
    # traced graphs: Triton exactly for CUDA tensors (use_triton's import probe is not traceable)
    if not (x.is_cuda if compiling else use_triton(x, *packing.tensors)):
        return coarse_head_reference(x, packing.dense(), packing.coef(), bits=packing.bits,
                                     group_size=packing.group_size, bound=bound, sigma=sigma, block=block,
                                     kcand=kcand, write_logits=write_logits)
    route = dispatch.coarse_route(call_of(packing, x, bound, block, compiling))
    w, s, z, gs = _operands(route, packing)
    op = torch.ops.lowbit.coarse_head if compiling else _coarse_head_impl
    return CoarseOut(*op(x, w, s, z, gs, _ROUTES.index(route), packing.kind, packing.bits or 0,
                         packing.group_size, packing.n, packing.padded_k, block, kcand, bound, float(sigma),
                         bool(write_logits)))


def _coarse_head_impl(x: torch.Tensor, w: torch.Tensor, s: torch.Tensor, z: torch.Tensor, gs: torch.Tensor,
                      route: int, kind: int, bits: int, group_size: int, n: int, padded_k: int, block: int,
                      kcand: int, bound: int, sigma: float, write_logits: bool
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    kernel = _ROUTES[route]
    if x.stride(1) != 1:
        x = x.contiguous()
    if kernel == "wgmma_int8":
        from lowbit.ops.coarse_head.wgmma_int8 import coarse_wgmma

        return coarse_wgmma(x, w, s, n=n, bits=bits, block=block, kcand=kcand, write_logits=write_logits,
                            table_r=z if z.dtype == torch.float32 else None)
    if kernel == "mma_f16":
        from lowbit.ops.coarse_head.mma_f16 import coarse_mma

        return coarse_mma(x, w, s, n=n, ell=padded_k // (8 // bits), bits=bits, group_size=group_size, block=block,
                          kcand=kcand, write_logits=write_logits, bound=bound)
    if kernel == "gemv_half2":
        from lowbit.ops.coarse_head.gemv_half2 import coarse_gemv_half2

        return coarse_gemv_half2(x, w, s, z, n=n, bits=bits, group_size=group_size, block=block, kcand=kcand,
                                 write_logits=write_logits)
    from lowbit.ops.coarse_head.coarse_fp32 import coarse_fp32, fp32_config

    return coarse_fp32(x, kind, w, s, z, gs, n=n, bits=bits or None, group_size=group_size, padded_k=padded_k,
                       block=block, kcand=kcand, bound=bound, sigma=sigma, write_logits=write_logits,
                       config=fp32_config(x.shape[0], bits if kind == KIND_INTX else None))


_coarse_head_op = torch.library.custom_op("lowbit::coarse_head", _coarse_head_impl, mutates_args=())


@_coarse_head_op.register_fake
def _(x, w, s, z, gs, route, kind, bits, group_size, n, padded_k, block, kcand, bound, sigma, write_logits):
    m = x.shape[0]
    nb = -(-n // block)
    c = nb * kcand
    cert = m if bound != BOUND_NONE else 0
    f32 = dict(dtype=torch.float32, device=x.device)
    return (x.new_empty(m, c, **f32), x.new_empty(cert, c, **f32), x.new_empty(m, c, dtype=torch.int64),
            x.new_empty(cert, nb, **f32), x.new_empty(cert, nb, **f32),
            x.new_empty(m if write_logits else 0, n, **f32))


__all__ = ["BOUND_DET", "BOUND_NONE", "BOUND_STAT", "call_of", "coarse_head", "coarse_head_scaled", "unscale"]
