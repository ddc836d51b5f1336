"""Checkpoints torchao writes: its tensor subclasses flattened into safetensors.

torchao (``torchao.prototype.safetensors.flatten_tensor_state_dict``, which transformers'
``save_pretrained`` uses for a model quantized with a ``TorchAoConfig``) stores a quantized
weight ``<prefix>.weight`` as plain tensors ``<prefix>._weight_<attr>`` and describes it in the
safetensors *header* metadata: ``metadata["<prefix>.weight"]`` is a JSON object
``{"_type": <subclass>, "_data": {<attributes>}, "_tensor_data_names": [<attr>, ...]}`` and
``metadata["tensor_names"]`` lists every weight (an unquantized one is ``{"_type": "Tensor"}``,
stored under its own name). :func:`lowbit.io.load_checkpoint` keeps these entries as the
checkpoint's ``quant_config`` (:func:`torchao_config`); :func:`read_torchao` reads one layer.

Read, bit-exact (the lowbit format's ``dequantize(dtype)`` equals torchao's ``dequantize()`` bit
for bit; ``dtype`` is the subclass's own, :class:`~lowbit.io.Layer` ``options["dtype"]``):

* ``Float8Tensor`` (``Float8WeightOnlyConfig``, ``Float8DynamicActivationFloat8WeightConfig``),
  ``qdata`` e4m3 ``[N, K]``, ``scale`` ``w = f32(qdata) * scale`` per ``block_size``:
  ``[N, K]`` -> FP8 ``"tensor"``; ``[1, K]`` -> ``"row"``; ``[b, b]`` -> ``"block"`` b;
  ``[1, b]`` -> ``"group"`` b. Scales fp32 (bf16 / fp16 cast exactly).
* ``MXTensor`` (``MXDynamicActivationMXWeightConfig``), block 32, ``scale`` E8M0, swizzled
  (cuBLAS 128x4 layout, ``is_swizzled_scales``) or not: ``float4_e2m1fn_x2`` elements (``qdata``
  uint8 ``[N, K/2]``, element 2i in the low nibble) -> MXFP4; ``float8_e4m3fn`` elements (MXFP8)
  -> FP8 ``"group"`` 32 with ``scale_fmt="ue8m0"`` (the scale decoded to its fp32 power of two).
* ``NVFP4Tensor`` (``NVFP4WeightOnlyConfig``, ``NVFP4DynamicActivationNVFP4WeightConfig``):
  ``qdata`` uint8 ``[N, K/2]``, ``scale`` e4m3 (swizzled or not), ``per_tensor_scale`` fp32 (a
  multiplier; absent -> 1.0) -> NVFP4.
* ``IntxUnpackedToInt8Tensor`` (``IntxWeightOnlyConfig``, ``Int8DynamicActivationIntxWeightConfig``)
  with ``target_dtype`` int2 / int4 / int8, and ``Int8Tensor`` (``Int8WeightOnlyConfig``,
  ``Int8DynamicActivationInt8WeightConfig``): signed codes ``q`` in int8, ``zero_point`` int8,
  ``w = (q - zero_point) * scale`` per ``block_size`` ``[1, G]`` (or ``[N, K]``, one scale) ->
  INTx, whose unsigned codes are ``q + 2^(b-1)`` (zero-points likewise). INTx keeps fp16 scales:
  a scale fp16 cannot hold exactly is refused, naming the tensor. torchao computes the scales in
  the model's dtype, so a bf16 / fp16 model's read (``Int8Tensor`` stores them as fp32 but of
  bf16 / fp16 values), an fp32 model's almost never do. A group whose codes all equal its
  zero-point is 0 whatever its (finite) scale: its scale (torchao gives an all-zero group
  ``finfo.tiny``) is not checked. G a multiple of 16, K % 16 == 0.
* ``"Tensor"`` (an unquantized weight) -> the tensor itself (variant ``dense``).

Refused with a ``ValueError`` naming the torchao layout: ``Int4Tensor``,
``Int4PlainInt32Tensor``, ``Int4TilePackedTo4dTensor`` (``Int4WeightOnlyConfig``'s packings for
CUDA / XPU kernels: torchao writes them only there), ``float8_e5m2`` / FP6 elements, other block
sizes, 1 / 3 / 5 / 6 / 7-bit ``IntxUnpackedToInt8Tensor`` codes, weights that are not 2-D (MoE
expert stacks), and any subclass not listed here.
"""
from __future__ import annotations

import json
from typing import Mapping

import torch

from lowbit._validate import require
from lowbit.formats.e8m0 import ue8m0_decode
from lowbit.formats.fp8 import FP8
from lowbit.formats.intx import ZERO_GROUP_SCALE, INTx
from lowbit.formats.mxfp4 import GROUP_SIZE as MX_GROUP
from lowbit.formats.mxfp4 import MXFP4
from lowbit.formats.nvfp4 import GROUP_SIZE as NV_GROUP
from lowbit.formats.nvfp4 import NVFP4, unswizzle_scales
from lowbit.io._tensors import SCALE_DTYPES, fp16_exact, name_of, scale_fp32

PRODUCER = "torchao"
FP8_TENSOR_TORCHAO = "fp8-tensor-torchao"
FP8_ROW_TORCHAO = "fp8-row-torchao"
FP8_BLOCK_TORCHAO = "fp8-block-torchao"
FP8_GROUP_TORCHAO = "fp8-group-torchao"
MXFP8_TORCHAO = "mxfp8-torchao"
MXFP4_TORCHAO = "mxfp4-torchao"
NVFP4_TORCHAO = "nvfp4-torchao"
INT_TORCHAO = "int-torchao"
TORCHAO_VARIANTS = (FP8_TENSOR_TORCHAO, FP8_ROW_TORCHAO, FP8_BLOCK_TORCHAO, FP8_GROUP_TORCHAO, MXFP8_TORCHAO, MXFP4_TORCHAO,
                    NVFP4_TORCHAO, INT_TORCHAO)

#: torchao subclasses refused by name, and why
_REFUSED = {
    "Int4Tensor": "int4 weights packed for mslk's CUDA kernels (Int4WeightOnlyConfig, packing 'plain')",
    "Int4PlainInt32Tensor": "int4 weights packed into int32 for XPU / NPU kernels (Int4WeightOnlyConfig, packing 'plain_int32')",
    "Int4TilePackedTo4dTensor": "int4 weights in tinygemm's 4-d tiles (Int4WeightOnlyConfig, packing 'tile_packed_to_4d')",
}
_INTX_BITS = {"int2": 2, "int4": 4, "int8": 8}
_READS = ("Float8Tensor (e4m3; per tensor, per row, [b, b] blocks, [1, b] groups), MXTensor (MXFP4, MXFP8 e4m3; block 32), "
          "NVFP4Tensor, IntxUnpackedToInt8Tensor (int2 / int4 / int8) and Int8Tensor with fp16-exact scales, plain Tensor")


def _entry(name: str, raw) -> dict:
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as e:
            raise ValueError(f"torchao metadata for {name!r} is not valid JSON: {e}") from None
    require(isinstance(raw, dict) and isinstance(raw.get("_type"), str),
            f"torchao metadata for {name!r} must be a JSON object with a '_type', got {raw!r:.200}")
    if raw["_type"] != "Tensor":
        require(isinstance(raw.get("_data"), dict) and isinstance(raw.get("_tensor_data_names"), list),
                f"torchao metadata for {name!r} ({raw['_type']}) needs '_data' (an object) and '_tensor_data_names' (a list)")
    return raw


def torchao_config(metadata: Mapping[str, str] | None) -> dict | None:
    """``{"producer": {"name": "torchao"}, "tensors": {weight name: entry}}`` from a safetensors
    header torchao wrote, or None for any other header.

    A header is torchao's when its ``tensor_names`` is a JSON list of names that each have an
    entry (anything else, e.g. another writer's ``tensor_names``, is left alone: None); an entry
    that is not a JSON object with a ``_type`` (and ``_data``, ``_tensor_data_names`` for a
    subclass) is then a ValueError naming it.
    """
    if not isinstance(metadata, Mapping) or not isinstance(metadata.get("tensor_names"), str):
        return None
    try:
        names = json.loads(metadata["tensor_names"])
    except json.JSONDecodeError:
        return None
    if not (isinstance(names, list) and names and all(isinstance(n, str) and n in metadata for n in names)):
        return None
    return {"producer": {"name": PRODUCER}, "tensors": {n: _entry(n, metadata[n]) for n in names}}


def is_torchao_config(config) -> bool:
    """Whether ``config`` is a quant_config :func:`torchao_config` made."""
    return (isinstance(config, Mapping) and isinstance(config.get("producer"), Mapping)
            and config["producer"].get("name") == PRODUCER and isinstance(config.get("tensors"), Mapping))


def torchao_layers(config: Mapping) -> list[str]:
    """The prefixes (module names) whose ``weight`` torchao stored as a quantized subclass."""
    require(is_torchao_config(config), "config must be a torchao quant_config (from torchao_config / load_checkpoint)")
    return [n.rsplit(".", 1)[0] if "." in n else "" for n, e in config["tensors"].items()
            if n.rsplit(".", 1)[-1] == "weight" and e["_type"] != "Tensor"]


def _dtype(value, what: str) -> torch.dtype | str:
    """A ``{"_type": "torch.dtype", "_data": "bfloat16"}`` value as a torch dtype (or its name; a
    plain string, as torchao's FP6 element types ``"fp6_e2m3"`` are, is returned as is)."""
    if isinstance(value, str):
        return value
    require(isinstance(value, dict) and value.get("_type") == "torch.dtype" and isinstance(value.get("_data"), str),
            f"{what} must be a torch.dtype entry, got {value!r:.200}")
    dt = getattr(torch, value["_data"], None)
    return dt if isinstance(dt, torch.dtype) else value["_data"]


def _data(tensors: Mapping[str, torch.Tensor], prefix: str, attr: str, layout: str, suffix: str) -> torch.Tensor:
    name = name_of(prefix, f"_{suffix}_{attr}")
    require(name in tensors, f"{layout}: checkpoint has no tensor {name!r}")
    return tensors[name]


def _scale_fp32(scale: torch.Tensor, name: str) -> torch.Tensor:
    require(scale.dtype in SCALE_DTYPES, f"tensor {name!r} has dtype {scale.dtype}; expected float32, bfloat16 or float16")
    return scale_fp32(scale)


def _unswizzle(scale: torch.Tensor, rows: int, cols: int, name: str) -> torch.Tensor:
    """torchao's swizzled scales (``to_blocked``: the cuBLAS 128x4 layout, padded, any 2-d view)
    back to ``[rows, cols]``."""
    rp, cp = -(-rows // 128) * 128, -(-cols // 4) * 4
    require(scale.numel() == rp * cp, f"tensor {name!r} has shape {tuple(scale.shape)}: {scale.numel()} swizzled scales, "
                                      f"expected {rp * cp} for a [{rows}, {cols}] scale grid padded to [{rp}, {cp}]")
    flat = scale.contiguous().view(torch.uint8).reshape(rp, cp)
    return unswizzle_scales(flat, rows, cols).view(scale.dtype)


def _block(meta: dict, layout: str) -> list:
    b = meta["_data"].get("block_size")
    require(isinstance(b, list) and len(b) == 2 and all(isinstance(x, int) and x > 0 for x in b),
            f"{layout}: block_size must be a list of two positive ints for a 2-D weight, got {b!r}")
    return b


def _read_float8(tensors, prefix, meta, suffix, layout):
    q = _data(tensors, prefix, "qdata", layout, suffix)
    require(q.dim() == 2, f"{layout}: lowbit reads 2-D weights, got qdata of shape {tuple(q.shape)}")
    require(q.dtype == torch.float8_e4m3fn, f"{layout} with {q.dtype} data: lowbit's FP8 holds float8_e4m3fn only")
    sname = name_of(prefix, f"_{suffix}_scale")
    scale = _scale_fp32(_data(tensors, prefix, "scale", layout, suffix), sname)
    n, k = q.shape
    bn, bk = _block(meta, layout)
    if (bn, bk) == (n, k):
        granularity, variant = "tensor", FP8_TENSOR_TORCHAO
    elif (bn, bk) == (1, k):
        granularity, variant = "row", FP8_ROW_TORCHAO
    elif bn == bk and n % bn == 0 and k % bk == 0:
        granularity, variant = "block", FP8_BLOCK_TORCHAO
    elif bn == 1 and k % bk == 0:
        granularity, variant = "group", FP8_GROUP_TORCHAO
    else:
        raise ValueError(f"{layout} with block_size {[bn, bk]} for a {[n, k]} weight: lowbit's FP8 reads per tensor {[n, k]}, "
                         f"per row {[1, k]}, square blocks [b, b] dividing the weight and groups [1, b] dividing K")
    grid = (n // bn, k // bk)
    require(scale.numel() == grid[0] * grid[1] and scale.dim() in (0, 2) and (scale.dim() == 0 or tuple(scale.shape) == grid),
            f"tensor {sname!r} has shape {tuple(scale.shape)}, expected {grid} for block_size {[bn, bk]} and a {[n, k]} weight")
    scale = scale.reshape(grid)
    return FP8(q, scale.reshape(()) if granularity == "tensor" else scale, granularity, bn if granularity == "block" else bk), variant


def _read_mx(tensors, prefix, meta, suffix, layout):
    d = meta["_data"]
    elem = _dtype(d.get("elem_dtype"), f"{layout} elem_dtype")
    layout = f"{layout} with {elem if isinstance(elem, str) else str(elem).replace('torch.', '')} elements"
    q = _data(tensors, prefix, "qdata", layout, suffix)
    require(q.dim() == 2, f"{layout}: lowbit reads 2-D weights, got qdata of shape {tuple(q.shape)}")
    bs = d.get("block_size")
    sname = name_of(prefix, f"_{suffix}_scale")
    scale = _data(tensors, prefix, "scale", layout, suffix)
    require(scale.dtype in (torch.float8_e8m0fnu, torch.uint8), f"tensor {sname!r} has dtype {scale.dtype}; expected float8_e8m0fnu (E8M0)")
    if elem == torch.float4_e2m1fn_x2:
        require(bs == MX_GROUP, f"{layout} and block_size {bs!r}: lowbit's MXFP4 has blocks of 32")
        require(q.dtype in (torch.uint8, torch.float4_e2m1fn_x2), f"{layout}: qdata has dtype {q.dtype}; expected uint8")
        n, k = q.shape[0], q.shape[1] * 2
    elif elem == torch.float8_e4m3fn:
        require(isinstance(bs, int) and bs > 0, f"{layout}: block_size must be a positive int, got {bs!r}")
        require(q.dtype == torch.float8_e4m3fn, f"{layout}: qdata has dtype {q.dtype}; expected float8_e4m3fn")
        n, k = q.shape
    else:
        raise ValueError(f"{layout}: lowbit reads MXTensor elements float4_e2m1fn_x2 (MXFP4) and float8_e4m3fn (MXFP8) only")
    require(k % bs == 0, f"{layout}: K = {k} is not a multiple of block_size {bs}")
    if d.get("is_swizzled_scales"):
        scale = _unswizzle(scale, n, k // bs, sname)
    else:
        require(tuple(scale.shape) == (n, k // bs), f"tensor {sname!r} has shape {tuple(scale.shape)}, expected {(n, k // bs)}")
    scale = scale.contiguous().view(torch.uint8)
    if elem == torch.float8_e4m3fn:
        return FP8(q, ue8m0_decode(scale), "group", bs, "ue8m0"), MXFP8_TORCHAO
    return MXFP4(q.view(torch.uint8), scale), MXFP4_TORCHAO


def _read_nvfp4(tensors, prefix, meta, suffix, layout):
    d = meta["_data"]
    require(d.get("block_size", NV_GROUP) == NV_GROUP, f"{layout} with block_size {d.get('block_size')!r}: NVFP4 has blocks of 16")
    q = _data(tensors, prefix, "qdata", layout, suffix)
    require(q.dim() == 2 and q.dtype in (torch.uint8, torch.float4_e2m1fn_x2),
            f"{layout}: lowbit reads 2-D uint8 qdata, got {q.dtype} of shape {tuple(q.shape)}")
    n, k = q.shape[0], q.shape[1] * 2
    require(k % NV_GROUP == 0, f"{layout}: K = {k} is not a multiple of 16")
    sname = name_of(prefix, f"_{suffix}_scale")
    scale = _data(tensors, prefix, "scale", layout, suffix)
    require(scale.dtype == torch.float8_e4m3fn, f"tensor {sname!r} has dtype {scale.dtype}; expected float8_e4m3fn")
    if d.get("is_swizzled_scales"):
        scale = _unswizzle(scale, n, k // NV_GROUP, sname)
    else:
        require(tuple(scale.shape) == (n, k // NV_GROUP), f"tensor {sname!r} has shape {tuple(scale.shape)}, expected {(n, k // NV_GROUP)}")
    pname = name_of(prefix, f"_{suffix}_per_tensor_scale")
    if pname in tensors:
        gs = tensors[pname]
        require(gs.dtype == torch.float32 and gs.numel() == 1, f"tensor {pname!r} must be an fp32 scalar, got {gs.dtype} {tuple(gs.shape)}")
        gs = gs.reshape(()).clone()
    else:
        gs = torch.ones((), dtype=torch.float32, device=q.device)  # torchao: the block scales alone
    return NVFP4(q.contiguous().view(torch.uint8), scale.contiguous(), gs), NVFP4_TORCHAO


def _read_int(tensors, prefix, meta, suffix, layout, bits):
    q = _data(tensors, prefix, "qdata", layout, suffix)
    require(q.dim() == 2 and q.dtype == torch.int8, f"{layout}: lowbit reads 2-D int8 qdata, got {q.dtype} of shape {tuple(q.shape)}")
    n, k = q.shape
    bn, bk = _block(meta, layout)
    require((bn, bk) in ((1, bk), (n, k)) and k % bk == 0,
            f"{layout} with block_size {[bn, bk]} for a {[n, k]} weight: lowbit's INTx reads groups [1, G] along K (G dividing K) "
            "or one scale for the tensor")
    g = k if bn == n else bk
    groups = k // g
    half = 1 << (bits - 1)
    sname = name_of(prefix, f"_{suffix}_scale")
    scale = _data(tensors, prefix, "scale", layout, suffix)
    require(scale.dtype in SCALE_DTYPES, f"tensor {sname!r} has dtype {scale.dtype}; expected a float dtype")
    require(scale.numel() == n * groups or (bn == n and scale.numel() == 1),
            f"tensor {sname!r} has shape {tuple(scale.shape)}: expected {n * groups} scales for block_size {[bn, bk]}")
    zname = name_of(prefix, f"_{suffix}_zero_point")
    if zname in tensors:
        zp = tensors[zname]
        require(zp.dtype in (torch.int8, torch.int32, torch.int64) and zp.numel() == scale.numel(),
                f"tensor {zname!r} has {zp.dtype} {tuple(zp.shape)}; expected integers shaped like the scale {tuple(scale.shape)}")
        zp = zp.to(torch.int64).reshape(-1, 1).expand(n, groups) if bn == n else zp.to(torch.int64).reshape(n, groups)
    else:
        zp = torch.zeros(n, groups, dtype=torch.int64, device=q.device)
    require(bits == 8 or bool(((q >= -half) & (q < half)).all()),
            f"{layout}: qdata holds codes outside [{-half}, {half - 1}]")
    require(bool(((zp >= -half) & (zp < half)).all()), f"{layout}: tensor {zname!r} holds zero-points outside [{-half}, {half - 1}]")
    require(g % 16 == 0 and k % 16 == 0, f"{layout}: group size {g} and K = {k} must be multiples of 16 for lowbit's INTx")
    scale = scale.reshape(-1, 1).expand(n, groups) if bn == n else scale.reshape(n, groups)
    # a group whose codes all equal its zero-point is 0 at any finite scale (torchao gives an
    # all-zero group the scale finfo.tiny, which fp16 cannot hold): it gets INTx's own
    dead = (q.to(torch.int64).view(n, groups, g) == zp.unsqueeze(-1)).all(-1) & torch.isfinite(scale)
    s16 = fp16_exact(torch.where(dead, torch.full_like(scale, ZERO_GROUP_SCALE), scale), sname, layout)
    return INTx.from_codes(q.to(torch.int64) + half, s16, zp + half, bits, g), INT_TORCHAO


def read_torchao(tensors: Mapping[str, torch.Tensor], prefix: str, config: Mapping, suffix: str = "weight"):
    """The layer torchao stored as ``<prefix>.<suffix>``, as a :class:`~lowbit.io.Layer`.

    ``config``: the checkpoint's ``quant_config`` from :func:`~lowbit.io.load_checkpoint` (or
    :func:`torchao_config` of a safetensors header; the raw header is accepted too).
    ``Layer.fmt`` is the lowbit format (FP8, MXFP4, NVFP4, INTx; the tensor for an unquantized
    weight), ``Layer.variant`` one of :data:`TORCHAO_VARIANTS` (or ``"dense"``),
    ``Layer.options`` ``{"torchao_type": ..., "dtype": <the dtype torchao dequantizes to>,
    "activation": {attr: tensor}}``, the last holding, as stored, what the subclass keeps for its
    activations beside the weight (e.g. ``act_pre_scale``, a smoothing factor the activations are
    multiplied by before the GEMM; NVFP4's static ``act_per_tensor_scale``): a caller computing
    the layer must apply them. A layout lowbit does not read is a ValueError naming it.
    """
    from lowbit.io.layer import DENSE, Layer

    if isinstance(config, Mapping) and "tensor_names" in config:
        config = torchao_config(config)
    require(is_torchao_config(config), "config must be the quant_config of a checkpoint torchao wrote "
                                       "(load_checkpoint(...).quant_config, or torchao_config(safetensors header))")
    wname = name_of(prefix, suffix)
    entries = config["tensors"]
    require(wname in entries, f"the torchao metadata has no entry {wname!r} (it lists {list(entries)[:6]}...)")
    meta = entries[wname]
    kind = meta["_type"]
    if kind == "Tensor":
        require(wname in tensors, f"checkpoint has no tensor {wname!r}")
        return Layer(tensors[wname], DENSE, {"torchao_type": kind, "dtype": tensors[wname].dtype})
    layout = f"layer {prefix!r} holds a torchao {kind}"
    d = meta["_data"]
    if kind in _REFUSED:
        raise ValueError(f"{layout} ({_REFUSED[kind]}), which lowbit does not read. lowbit reads torchao's {_READS}")
    for attr in meta["_tensor_data_names"]:  # a listed tensor that is missing: a truncated or mixed-up checkpoint
        _data(tensors, prefix, attr, layout, suffix)
    if kind == "Float8Tensor":
        fmt, variant = _read_float8(tensors, prefix, meta, suffix, layout)
        dtype = d.get("dtype")
    elif kind == "MXTensor":
        fmt, variant = _read_mx(tensors, prefix, meta, suffix, layout)
        dtype = d.get("orig_dtype")
    elif kind == "NVFP4Tensor":
        fmt, variant = _read_nvfp4(tensors, prefix, meta, suffix, layout)
        dtype = d.get("orig_dtype")
    elif kind == "IntxUnpackedToInt8Tensor":
        target = _dtype(d.get("target_dtype"), f"{layout} target_dtype")
        tname = target if isinstance(target, str) else str(target).replace("torch.", "")
        require(tname in _INTX_BITS, f"{layout} with target_dtype {tname} ({tname[3:] or '?'}-bit codes), which lowbit does not read: "
                                     f"lowbit's INTx has 2, 4 and 8 bits")
        fmt, variant = _read_int(tensors, prefix, meta, suffix, f"{layout} ({tname})", _INTX_BITS[tname])
        dtype = d.get("dtype")
    elif kind == "Int8Tensor":
        fmt, variant = _read_int(tensors, prefix, meta, suffix, layout, 8)
        dtype = d.get("dtype")
    else:
        raise ValueError(f"{layout}, a torchao layout lowbit does not read. lowbit reads torchao's {_READS}")
    out_dtype = _dtype(dtype, f"{layout} dtype") if dtype is not None else torch.float32
    require(isinstance(out_dtype, torch.dtype), f"{layout}: dtype {out_dtype!r} is not a torch dtype")
    extra = {a: tensors[name_of(prefix, f"_{suffix}_{a}")] for a in meta["_tensor_data_names"] if a not in _WEIGHT_DATA}
    return Layer(fmt, variant, {"torchao_type": kind, "dtype": out_dtype, "activation": extra})


#: the tensors that make the weight; any other a subclass lists is for the activations
_WEIGHT_DATA = ("qdata", "scale", "zero_point", "per_tensor_scale")
