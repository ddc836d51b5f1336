"""compressed-tensors checkpoints (llm-compressor): FP8 (per tensor, per channel, 128x128 blocks),
NVFP4, MXFP4 and integer pack-quantized weights.

FP8 ("float-quantized", num_bits 8, type float), per linear ``<prefix>``:

* ``<prefix>.weight``       float8_e4m3fn ``[N, K]``
* ``<prefix>.weight_scale`` the multiplier, ``w = f32(weight) * weight_scale`` broadcast per
  strategy: ``tensor`` -> shape ``()`` or ``(1,)``; ``channel`` -> ``[N, 1]``; ``block``
  (block_structure ``[128, 128]``) -> ``[ceil(N/128), ceil(K/128)]``. Stored in fp32, or in the
  model's dtype (bf16 / fp16: llm-compressor's ``FP8_DYNAMIC`` of a bf16 model); a bf16 / fp16
  value is always exactly an fp32 one, so the cast to fp32 is exact and the layer reads (and
  writes back) bit-exact. The strategy is told apart by the scale's shape (a 1-row weight whose
  channel and block scales coincide reads as ``channel``: both dequantize alike); other block
  sizes are refused.
* ``<prefix>.input_scale``  fp32 scalar, optional (static activation scales)

NVFP4 ("nvfp4-pack-quantized"):

* ``<prefix>.weight_packed``       uint8 ``[N, K/2]``, element 2i in the low nibble
* ``<prefix>.weight_scale``        float8_e4m3fn ``[N, K/16]``
* ``<prefix>.weight_global_scale`` fp32 scalar: the **inverse** of the ModelOpt ``weight_scale_2``
* ``<prefix>.input_global_scale``  fp32 scalar, optional (also an inverse)

The reader normalises to the multiplier form, ``global_scale = f32(1 / weight_global_scale)``.
fp32 reciprocals do not always round-trip (``1/(1/x) != x`` for about one value in eight), so
:func:`lowbit.io.read_layer` keeps the stored inverse and the writer accepts it back verbatim.

MXFP4 ("mxfp4-pack-quantized": num_bits 4, type float, group 32, symmetric):

* ``<prefix>.weight_packed`` uint8 ``[N, K/2]``, element 2i in the low nibble (as lowbit's MXFP4)
* ``<prefix>.weight_scale``  uint8 (or ``float8_e8m0fnu``) ``[N, K/32]``: UE8M0 exponent bytes

Integer ("pack-quantized": type int, num_bits b in 1..8, strategy group or channel), ``pf = 32 // b``:

* ``<prefix>.weight_packed``     int32 ``[N, ceil(K/pf)]``: the code of column k in word ``k // pf``,
  bits ``[(k % pf) b, (k % pf + 1) b)``; codes are stored *unsigned*, ``u = q + 2^(b-1)`` for the
  signed code q in ``[-2^(b-1), 2^(b-1))``; unused high bits zero
* ``<prefix>.weight_scale``      ``[N, ceil(K/G)]`` (channel: ``[N, 1]``), fp32 / bf16 / fp16
* ``<prefix>.weight_zero_point`` int32 ``[ceil(N/pf), ceil(K/G)]``, asymmetric only: the zero-points
  packed the same way but along N (row n in word ``n // pf``), also stored unsigned
* ``<prefix>.weight_shape``      int64 ``[2]`` = ``[N, K]``

``w = (u - u_zero) * scale`` with ``u_zero = 2^(b-1)`` when symmetric (no zero-point tensor). These
are exactly lowbit's :class:`~lowbit.formats.INTx` codes and zero-points (unsigned, ``(q - z) s``),
so :func:`write_int_ct` / :func:`read_int_ct` convert between the two without touching a value:
INTx's fp16 scales are written as fp16 by default, and a stored scale that fp16 cannot hold exactly
is refused on reading (naming the tensor).
"""
from __future__ import annotations

import math
from typing import Mapping

import torch

from lowbit._validate import check_tensor, require
from lowbit.formats.fp8 import FP8
from lowbit.formats.intx import BITS as INTX_BITS
from lowbit.formats.intx import INTx
from lowbit.formats.mxfp4 import GROUP_SIZE as MX_GROUP_SIZE
from lowbit.formats.mxfp4 import MXFP4
from lowbit.formats.nvfp4 import GROUP_SIZE, NVFP4
from lowbit.io._tensors import SCALE_DTYPES, fp16_exact, get, get_scalar, has, name_of, scale_fp32
from lowbit.io.modelopt import fp32_scalar


FP8_BLOCK = 128


def fp8_strategy(tensors: Mapping[str, torch.Tensor], prefix: str) -> str:
    """``"tensor"``, ``"channel"`` or ``"block"``: the compressed-tensors FP8 strategy of the layer
    under ``prefix``, from its ``weight_scale``'s shape (ValueError naming both shapes otherwise)."""
    data = get(tensors, prefix, "weight", dtypes=(torch.float8_e4m3fn,), ndim=2)
    scale = get(tensors, prefix, "weight_scale", dtypes=SCALE_DTYPES)
    n, k = data.shape
    shape = tuple(scale.shape)
    if shape in ((), (1,)):
        return "tensor"
    if shape == (n, 1):
        return "channel"
    if shape == (math.ceil(n / FP8_BLOCK), math.ceil(k / FP8_BLOCK)):
        return "block"
    raise ValueError(
        f"tensor {name_of(prefix, 'weight_scale')!r} has shape {shape} for an FP8 weight {(n, k)}: not a compressed-tensors "
        f"FP8 layout lowbit reads (strategy tensor: () or (1,); channel: {(n, 1)}; block 128x128: "
        f"{(math.ceil(n / FP8_BLOCK), math.ceil(k / FP8_BLOCK))})")


def read_fp8_ct(tensors: Mapping[str, torch.Tensor], prefix: str) -> FP8:
    """The :class:`FP8` weight under ``prefix``, any compressed-tensors strategy (``"tensor"``,
    ``"row"`` for channel, ``"block"`` 128); the scale cast exactly to fp32."""
    strategy = fp8_strategy(tensors, prefix)
    data = tensors[name_of(prefix, "weight")]
    scale = scale_fp32(tensors[name_of(prefix, "weight_scale")])
    if strategy == "tensor":
        return FP8(data, scale.reshape(()), "tensor")
    if strategy == "channel":
        return FP8(data, scale, "row")
    return FP8(data, scale, "block", FP8_BLOCK)


def read_fp8_channel(tensors: Mapping[str, torch.Tensor], prefix: str) -> FP8:
    """The per-row :class:`FP8` weight stored under ``prefix`` (fp32, bf16 or fp16 scale)."""
    data = get(tensors, prefix, "weight", dtypes=(torch.float8_e4m3fn,), ndim=2)
    scale = get(tensors, prefix, "weight_scale", dtypes=SCALE_DTYPES, shape=(data.shape[0], 1))
    return FP8(data, scale_fp32(scale), "row")


def _stored_scale(fmt: FP8, prefix: str, scale_dtype: torch.dtype, shape: tuple) -> torch.Tensor:
    require(scale_dtype in SCALE_DTYPES, f"scale_dtype must be one of {list(SCALE_DTYPES)}, got {scale_dtype}")
    scale = fmt.scale.reshape(shape)
    if scale_dtype != torch.float32:
        cast = scale.to(scale_dtype)
        require(bool(torch.equal(cast.to(torch.float32).view(torch.int32), scale.view(torch.int32))),
                f"{name_of(prefix, 'weight_scale')}: the scales are not all exactly representable in {scale_dtype}; "
                "write them as torch.float32")
        scale = cast
    return scale.contiguous()


def write_fp8_channel(fmt: FP8, prefix: str, *, input_scale: torch.Tensor | float | None = None, scalar_shape: tuple = (),
                      scale_dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """compressed-tensors FP8 per-channel tensors for a ``"row"`` :class:`FP8`; ``scale_dtype``
    bf16 / fp16 only where every scale is exact in it (ValueError otherwise)."""
    require(isinstance(fmt, FP8) and fmt.granularity == "row",
            f"write_fp8_channel needs a per-row FP8, got {type(fmt).__name__} {getattr(fmt, 'granularity', '')}")
    return write_fp8_ct(fmt, prefix, input_scale=input_scale, scalar_shape=scalar_shape, scale_dtype=scale_dtype)


def write_fp8_ct(fmt: FP8, prefix: str, *, input_scale: torch.Tensor | float | None = None, scalar_shape: tuple = (),
                 scale_dtype: torch.dtype = torch.float32, scale_shape: tuple = (1,)) -> dict[str, torch.Tensor]:
    """compressed-tensors FP8 tensors for a ``"tensor"`` (``weight_scale`` of shape
    ``scale_shape``, ``()`` or ``(1,)``), ``"row"`` or 128-``"block"`` :class:`FP8`."""
    require(isinstance(fmt, FP8) and (fmt.granularity in ("tensor", "row") or (fmt.granularity == "block" and fmt.block_size == FP8_BLOCK)),
            f"compressed-tensors FP8 is per tensor, per row or in 128x128 blocks, got {type(fmt).__name__} "
            f"{getattr(fmt, 'granularity', '')} {getattr(fmt, 'block_size', '')}")
    if fmt.granularity == "tensor":
        require(tuple(scale_shape) in ((), (1,)), f"scale_shape must be () or (1,), got {scale_shape}")
        shape = tuple(scale_shape)
    else:
        shape = tuple(fmt.scale.shape)
    out = {name_of(prefix, "weight"): fmt.data.contiguous(), name_of(prefix, "weight_scale"): _stored_scale(fmt, prefix, scale_dtype, shape)}
    if input_scale is not None:
        out[name_of(prefix, "input_scale")] = fp32_scalar("input_scale", input_scale, scalar_shape)
    return out


def read_nvfp4_ct(tensors: Mapping[str, torch.Tensor], prefix: str) -> NVFP4:
    """The :class:`NVFP4` weight under ``prefix``, global scale normalised to the multiplier."""
    packed = get(tensors, prefix, "weight_packed", dtypes=(torch.uint8,), ndim=2)
    n, half_k = packed.shape
    require((half_k * 2) % GROUP_SIZE == 0, f"tensor {name_of(prefix, 'weight_packed')!r} has shape {tuple(packed.shape)}: K = {half_k * 2} is not a multiple of 16")
    scale = get(tensors, prefix, "weight_scale", dtypes=(torch.float8_e4m3fn,), shape=(n, half_k * 2 // GROUP_SIZE))
    inv = get_scalar(tensors, prefix, "weight_global_scale")
    require(bool(torch.isfinite(inv).all() and (inv > 0).all()),
            f"tensor {name_of(prefix, 'weight_global_scale')!r} must be finite and positive, got {inv.flatten().tolist()}")
    return NVFP4(packed, scale, (1.0 / inv.reshape(())).to(torch.float32), GROUP_SIZE)


def write_nvfp4_ct(
    fmt: NVFP4,
    prefix: str,
    *,
    weight_global_scale: torch.Tensor | None = None,
    input_global_scale: torch.Tensor | float | None = None,
    scalar_shape: tuple = (1,),
) -> dict[str, torch.Tensor]:
    """compressed-tensors NVFP4 tensors for ``fmt``.

    ``weight_global_scale`` defaults to ``f32(1 / fmt.global_scale)``; pass the stored inverse
    (its reciprocal must equal ``fmt.global_scale`` bit for bit) to write it back unchanged.
    """
    require(isinstance(fmt, NVFP4), f"write_nvfp4_ct needs an NVFP4, got {type(fmt).__name__}")
    require(tuple(scalar_shape) in ((), (1,)), f"scalar_shape must be () or (1,), got {scalar_shape}")
    if weight_global_scale is None:
        inv = (1.0 / fmt.global_scale).reshape(scalar_shape)
    else:
        check_tensor("weight_global_scale", weight_global_scale, dtypes=(torch.float32,))
        require(weight_global_scale.numel() == 1, f"weight_global_scale must be a scalar, got shape {tuple(weight_global_scale.shape)}")
        back = (1.0 / weight_global_scale.reshape(())).to(torch.float32)
        require(bool(back.view(torch.int32) == fmt.global_scale.reshape(()).view(torch.int32)),
                f"weight_global_scale={float(weight_global_scale.flatten()[0])!r} is not the stored inverse of global_scale={float(fmt.global_scale)!r}")
        inv = weight_global_scale.reshape(scalar_shape)
    out = {
        name_of(prefix, "weight_packed"): fmt.packed.contiguous(),
        name_of(prefix, "weight_scale"): fmt.scale.contiguous(),
        name_of(prefix, "weight_global_scale"): inv.contiguous(),
    }
    if input_global_scale is not None:
        out[name_of(prefix, "input_global_scale")] = fp32_scalar("input_global_scale", input_global_scale, scalar_shape)
    return out


# ----------------------------------------------------------------------------------------- MXFP4
def read_mxfp4_ct(tensors: Mapping[str, torch.Tensor], prefix: str) -> MXFP4:
    """The :class:`MXFP4` weight stored under ``prefix`` in compressed-tensors'
    ``mxfp4-pack-quantized`` layout (tensors shared, not copied)."""
    packed = get(tensors, prefix, "weight_packed", dtypes=(torch.uint8,), ndim=2)
    n, half_k = packed.shape
    require((half_k * 2) % MX_GROUP_SIZE == 0,
            f"tensor {name_of(prefix, 'weight_packed')!r} has shape {tuple(packed.shape)}: K = {half_k * 2} is not a multiple of 32")
    scale = get(tensors, prefix, "weight_scale", dtypes=(torch.uint8, torch.float8_e8m0fnu), shape=(n, half_k * 2 // MX_GROUP_SIZE))
    return MXFP4(packed, scale if scale.dtype == torch.uint8 else scale.view(torch.uint8), group_size=MX_GROUP_SIZE)


def write_mxfp4_ct(fmt: MXFP4, prefix: str, *, scale_dtype: torch.dtype = torch.uint8) -> dict[str, torch.Tensor]:
    """compressed-tensors ``mxfp4-pack-quantized`` tensors for ``fmt`` (``scale_dtype`` uint8, as
    compressed-tensors writes, or ``float8_e8m0fnu``: the same bytes)."""
    require(isinstance(fmt, MXFP4), f"write_mxfp4_ct needs an MXFP4, got {type(fmt).__name__}")
    require(fmt.group_size == MX_GROUP_SIZE, f"compressed-tensors MXFP4 has group size 32, got {fmt.group_size}")
    require(scale_dtype in (torch.uint8, torch.float8_e8m0fnu), f"scale_dtype must be torch.uint8 or torch.float8_e8m0fnu, got {scale_dtype}")
    scale = fmt.scale.contiguous()
    return {name_of(prefix, "weight_packed"): fmt.packed.contiguous(),
            name_of(prefix, "weight_scale"): scale if scale_dtype == torch.uint8 else scale.view(scale_dtype)}


# ------------------------------------------------------------------------------ pack-quantized int
def _to_int32(words: torch.Tensor) -> torch.Tensor:
    """int64 holding uint32 bit patterns -> int32 with the same bits."""
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)


def pack_int32(codes: torch.Tensor, bits: int, dim: int) -> torch.Tensor:
    """Pack unsigned ``bits``-bit codes (any integer dtype, 2-D) into int32 words along ``dim``:
    element i of a run of ``32 // bits`` sits in bits ``[i bits, (i+1) bits)``; a partial last word
    is zero-padded."""
    pf = 32 // bits
    c = codes.to(torch.int64)
    if dim == 0:
        c = c.t()
    rows, cols = c.shape
    words = -(-cols // pf)
    padded = torch.zeros(rows, words * pf, dtype=torch.int64, device=c.device)
    padded[:, :cols] = c & ((1 << bits) - 1)
    shifts = torch.arange(pf, dtype=torch.int64, device=c.device) * bits
    out = _to_int32((padded.view(rows, words, pf) << shifts).sum(-1))
    return _dense(out.t()) if dim == 0 else out


def _dense(t: torch.Tensor) -> torch.Tensor:
    """A row-major copy with standard strides (``contiguous()`` keeps odd strides of size-1 dims,
    which break byte views)."""
    return torch.empty(t.shape, dtype=t.dtype, device=t.device).copy_(t)


def unpack_int32(words: torch.Tensor, bits: int, length: int, dim: int) -> torch.Tensor:
    """Inverse of :func:`pack_int32`: the first ``length`` codes along ``dim`` as int64."""
    pf = 32 // bits
    w = words.to(torch.int64) & 0xFFFFFFFF
    if dim == 0:
        w = w.t()
    shifts = torch.arange(pf, dtype=torch.int64, device=w.device) * bits
    codes = ((w.unsqueeze(-1) >> shifts) & ((1 << bits) - 1)).reshape(w.shape[0], -1)[:, :length]
    return codes.t() if dim == 0 else codes


def int_ct_params(tensors: Mapping[str, torch.Tensor], prefix: str, num_bits: int | None = None,
                  group_size: int | None = None) -> tuple[int, int, bool]:
    """``(num_bits, group_size, symmetric)`` of the pack-quantized int layer under ``prefix``, from
    its tensors' shapes where not given (ValueError naming the tensor when they do not decide it).

    The shapes alone cannot tell 7 from 8 bits (both pack 4 codes a word), nor every group size
    (``ceil(K / G)`` groups fit a range of G): without ``num_bits`` only 2, 4 and 8 bits are inferred,
    without ``group_size`` the multiple of 16 that gives the stored number of groups, the one that
    divides K where several fit (K = 96 in 2 groups: 48, not 64 or 80; K for one group). A
    checkpoint whose last group is partial (K = 96, G = 64) needs the config's ``group_size``."""
    shape = get(tensors, prefix, "weight_shape", dtypes=(torch.int64, torch.int32), shape=(2,))
    n, k = (int(x) for x in shape.tolist())
    sname = name_of(prefix, "weight_shape")
    require(n >= 0 and k > 0, f"tensor {sname!r} holds {[n, k]}: not a weight shape")
    packed = get(tensors, prefix, "weight_packed", dtypes=(torch.int32,), ndim=2)
    pname = name_of(prefix, "weight_packed")
    require(packed.shape[0] == n, f"tensor {pname!r} has shape {tuple(packed.shape)} but {sname!r} says {[n, k]}")
    if num_bits is None:
        # 7 and 8 bits share a packing factor (4 codes a word): widths lowbit reads decide it
        fits = [b for b in INTX_BITS if -(-k // (32 // b)) == packed.shape[1]]
        require(len(fits) == 1, f"tensor {pname!r} has shape {tuple(packed.shape)} for K = {k}: "
                                + ("no bit width lowbit reads (2, 4, 8) fits it" if not fits else f"bit widths {fits} all fit; pass num_bits"))
        num_bits = fits[0]
    require(isinstance(num_bits, int) and 1 <= num_bits <= 8, f"num_bits must be in 1..8, got {num_bits!r}")
    require(packed.shape[1] == -(-k // (32 // num_bits)),
            f"tensor {pname!r} has shape {tuple(packed.shape)}, expected {(n, -(-k // (32 // num_bits)))} for {num_bits}-bit codes and K = {k}")
    scale = get(tensors, prefix, "weight_scale", dtypes=SCALE_DTYPES, ndim=2)
    scname = name_of(prefix, "weight_scale")
    require(scale.shape[0] == n and scale.shape[1] >= 1, f"tensor {scname!r} has shape {tuple(scale.shape)}, expected ({n}, groups)")
    groups = scale.shape[1]
    if group_size is None:
        # ceil(K / G) = groups leaves a range of G; lowbit's group sizes are multiples of 16
        fits = [k] if groups == 1 else [g for g in range(16, k + 16, 16) if -(-k // g) == groups]
        whole = [g for g in fits if k % g == 0]  # the usual case (vLLM's kernels need it): whole groups
        require(len(whole) == 1 or len(fits) == 1, f"tensor {scname!r} has {groups} groups for K = {k}: "
                + (f"group sizes {fits} all fit; pass group_size" if fits else "no group size that is a multiple of 16 fits"))
        group_size = whole[0] if len(whole) == 1 else fits[0]
    require(isinstance(group_size, int) and group_size > 0 and -(-k // group_size) == groups,
            f"tensor {scname!r} has shape {tuple(scale.shape)}, expected {(n, -(-k // group_size) if isinstance(group_size, int) and group_size > 0 else '?')} "
            f"for K = {k} and group size {group_size!r}")
    symmetric = not has(tensors, prefix, "weight_zero_point")
    if not symmetric:
        get(tensors, prefix, "weight_zero_point", dtypes=(torch.int32,), shape=(-(-n // (32 // num_bits)), groups))
    return num_bits, group_size, symmetric


def read_int_ct(tensors: Mapping[str, torch.Tensor], prefix: str, *, num_bits: int | None = None,
                group_size: int | None = None) -> INTx:
    """The :class:`INTx` weight of a compressed-tensors ``pack-quantized`` int layer under ``prefix``.

    ``num_bits`` / ``group_size`` (the config's ``weights``) are taken from the tensors' shapes
    when omitted. Reads bit-exact or refuses (ValueError naming the tensor): bits must be 2, 4 or
    8, the group size a multiple of 16 (channel strategy: K), K a multiple of 16, every scale exact
    in fp16. K is padded to INTx's plane-split width with codes equal to the group's zero-point
    (value 0); the padding groups get INTx's quantizer's own (scale ``fp16(1e-8)`` rounded up, zero 0).
    """
    bits, g, symmetric = int_ct_params(tensors, prefix, num_bits, group_size)
    n, k = (int(x) for x in tensors[name_of(prefix, "weight_shape")].tolist())
    require(bits in INTX_BITS, f"layer {prefix!r} holds {bits}-bit codes; lowbit's INTx reads {list(INTX_BITS)}")
    require(g % 16 == 0, f"layer {prefix!r} has group size {g}; lowbit's INTx needs a multiple of 16")
    require(k % 16 == 0, f"tensor {name_of(prefix, 'weight_shape')!r} holds K = {k}; lowbit's INTx needs K % 16 == 0")
    scale = fp16_exact(tensors[name_of(prefix, "weight_scale")], name_of(prefix, "weight_scale"))
    groups = scale.shape[1]
    codes = unpack_int32(tensors[name_of(prefix, "weight_packed")], bits, k, dim=1)
    if symmetric:
        zero = torch.full((n, groups), 1 << (bits - 1), dtype=torch.int64, device=codes.device)
    else:
        zero = unpack_int32(tensors[name_of(prefix, "weight_zero_point")], bits, n, dim=0)
    return INTx.from_codes(codes, scale, zero, bits, g)


def write_int_ct(fmt: INTx, prefix: str, *, symmetric: bool = False, scale_dtype: torch.dtype = torch.float16) -> dict[str, torch.Tensor]:
    """compressed-tensors ``pack-quantized`` tensors for ``fmt`` (strategy group, group size
    ``fmt.group_size``; the padding past K is dropped).

    ``symmetric=True`` writes no zero-point and needs every zero-point to be ``2^(bits-1)``.
    ``scale_dtype``: fp16 (INTx's own, default), or fp32 / bf16 where every scale is exact in it.
    """
    require(isinstance(fmt, INTx), f"write_int_ct needs an INTx, got {type(fmt).__name__}")
    require(scale_dtype in SCALE_DTYPES, f"scale_dtype must be one of {list(SCALE_DTYPES)}, got {scale_dtype}")
    require(fmt.k > 0, f"write_int_ct needs K > 0, got K = {fmt.k}")
    n, k, g, bits = fmt.shape[0], fmt.k, fmt.group_size, fmt.bits
    groups = -(-k // g)
    codes = fmt.codes()[:, :k]
    zero = fmt.zero[:, :groups]
    scale = fmt.scale[:, :groups]
    if scale_dtype != torch.float16:
        cast = scale.to(scale_dtype)
        require(bool(torch.equal(cast.to(torch.float32), scale.to(torch.float32))),
                f"{name_of(prefix, 'weight_scale')}: the scales are not all exactly representable in {scale_dtype}; write them as torch.float16")
        scale = cast
    out = {
        name_of(prefix, "weight_packed"): pack_int32(codes, bits, dim=1),
        name_of(prefix, "weight_scale"): _dense(scale),
        name_of(prefix, "weight_shape"): torch.tensor([n, k], dtype=torch.int64),
    }
    if symmetric:
        mid = 1 << (bits - 1)
        require(bool((zero == mid).all()), f"{prefix}: symmetric pack-quantized needs every zero-point to be {mid}; "
                                            "this INTx is asymmetric (write it with symmetric=False)")
    else:
        out[name_of(prefix, "weight_zero_point")] = pack_int32(zero, bits, dim=0)
    return out


# ------------------------------------------------------------------------------------------ config
def ct_quantization_config(fmt: str, *, num_bits: int = 4, group_size: int = 32, symmetric: bool = False,
                           ignore=(), extra_targets=()) -> dict:
    """The ``quantization_config`` of ``config.json`` for weights written by :func:`write_int_ct`
    (``fmt="int"``: format ``pack-quantized``, strategy group) or :func:`write_mxfp4_ct`
    (``fmt="mxfp4"``: ``mxfp4-pack-quantized``, group 32): one config group over every ``Linear``
    (and the module names in ``extra_targets``, e.g. ``lm_head``), weight-only
    (``input_activations`` null), ``ignore`` listing the modules left unquantized."""
    require(fmt in ("int", "mxfp4"), f"fmt must be 'int' or 'mxfp4', got {fmt!r}")
    if fmt == "int":
        require(isinstance(num_bits, int) and 1 <= num_bits <= 8, f"num_bits must be in 1..8, got {num_bits!r}")
        require(isinstance(group_size, int) and group_size > 0, f"group_size must be a positive int, got {group_size!r}")
        form = "pack-quantized"
        weights = {"num_bits": num_bits, "type": "int", "symmetric": bool(symmetric), "strategy": "group",
                   "group_size": group_size, "dynamic": False, "actorder": None}
    else:
        form = "mxfp4-pack-quantized"
        weights = {"num_bits": 4, "type": "float", "symmetric": True, "strategy": "group", "group_size": MX_GROUP_SIZE,
                   "dynamic": False}
    return {
        "quant_method": "compressed-tensors",
        "format": form,
        "quantization_status": "compressed",
        "config_groups": {"group_0": {"targets": ["Linear", *extra_targets], "weights": weights, "input_activations": None,
                                      "output_activations": None, "format": form}},
        "ignore": list(ignore),
        "kv_cache_scheme": None,
    }
