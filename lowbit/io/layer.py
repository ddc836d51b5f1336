"""Which checkpoint variant a layer holds, and a bit-exact read / write of the whole layer."""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import torch

from lowbit._validate import require
from lowbit.io import compressed_tensors as ct
from lowbit.io import deepseek as ds
from lowbit.io import modelopt as mo
from lowbit.io._tensors import get, get_scalar, has, name_of

NVFP4_MODELOPT = "nvfp4-modelopt"
NVFP4_CT = "nvfp4-compressed-tensors"
FP8_ROW_CT = "fp8-row-compressed-tensors"
FP8_TENSOR_CT = "fp8-tensor-compressed-tensors"
FP8_BLOCK_CT = "fp8-block-compressed-tensors"
FP8_BLOCK_DEEPSEEK = "fp8-block-deepseek"
MXFP4_DEEPSEEK = "mxfp4-deepseek"
MXFP4_CT = "mxfp4-compressed-tensors"
INT_CT = "int-compressed-tensors"
DENSE = "dense"
VARIANTS = (NVFP4_MODELOPT, NVFP4_CT, FP8_ROW_CT, FP8_TENSOR_CT, FP8_BLOCK_CT, FP8_BLOCK_DEEPSEEK, MXFP4_DEEPSEEK, MXFP4_CT,
            INT_CT, DENSE)

#: what :func:`detect_format` reads, for its refusals
READS = ("ModelOpt NVFP4 (weight uint8 + weight_scale e4m3 + weight_scale_2); compressed-tensors NVFP4 "
         "(weight_packed uint8 + weight_scale e4m3 + weight_global_scale), MXFP4 (weight_packed uint8 + weight_scale "
         "UE8M0 [N, K/32]), pack-quantized int 2/4/8-bit (weight_packed int32 + weight_scale + weight_shape, "
         "opt. weight_zero_point) and FP8 per tensor / channel / 128x128 block "
         "(weight e4m3 + weight_scale fp32/bf16/fp16); DeepSeek FP8 block (weight e4m3 + weight_scale_inv / scale) and "
         "FP4 experts (weight int8/uint8 + scale UE8M0 [N, K/32]); dense fp32/bf16/fp16 weight")


def _desc(t: torch.Tensor) -> str:
    return f"{str(t.dtype).replace('torch.', '')} {list(t.shape)}"


def _ct_packed_layout(tensors: Mapping[str, torch.Tensor], prefix: str) -> str:
    """Name the compressed-tensors pack-quantized layout under ``prefix`` from its tensors."""
    p = tensors[name_of(prefix, "weight_packed")]
    seen = [f"weight_packed {_desc(p)}"] + [f"{s} {_desc(tensors[name_of(prefix, s)])}" for s in
                                            ("weight_scale", "weight_zero_point", "weight_shape", "weight_global_scale")
                                            if has(tensors, prefix, s)]
    sc = tensors.get(name_of(prefix, "weight_scale"))
    if p.dtype == torch.uint8 and p.dim() == 2 and sc is not None and sc.dim() == 2 and sc.shape[1] * 32 == p.shape[1] * 2 \
            and sc.dtype in (torch.uint8, torch.float8_e8m0fnu) and not has(tensors, prefix, "weight_global_scale"):
        layout = "compressed-tensors MXFP4 (format mxfp4-pack-quantized: FP4 E2M1 codes, num_bits 4, type float, group 32, E8M0 scales)"
    elif p.dtype == torch.uint8 and has(tensors, prefix, "weight_global_scale"):
        layout = f"compressed-tensors NVFP4 (nvfp4-pack-quantized) with weight_scale {_desc(sc) if sc is not None else 'missing'}"
    elif p.dtype == torch.int32:
        layout = ("compressed-tensors pack-quantized integer weights (int32 words) "
                  + ("with a weight_global_scale" if has(tensors, prefix, "weight_global_scale") else "without the weight_shape that gives K"))
    else:
        layout = "a compressed-tensors pack-quantized layout"
    return f"{layout}; tensors seen: {', '.join(seen)}"

_DENSE_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def detect_format(tensors: Mapping[str, torch.Tensor], prefix: str) -> str:
    """The variant stored under ``prefix``: one of :data:`VARIANTS` (ValueError if none fits).

    Decided by tensor names and the weight dtype: ``weight_packed`` -> compressed-tensors NVFP4
    (with ``weight_global_scale``), integer pack-quantized (int32, with ``weight_shape``) or MXFP4
    (uint8 with a UE8M0 ``weight_scale``);
    ``weight_scale_2`` -> ModelOpt NVFP4; e4m3 ``weight`` with ``weight_scale`` -> compressed-tensors
    FP8 per tensor / channel / 128x128 block (by the scale's shape), with ``weight_scale_inv``/``scale``
    -> DeepSeek block FP8; a 1-byte integer or
    float4_e2m1fn_x2 ``weight`` with ``scale``/``weight_scale_inv`` -> DeepSeek FP4 (MXFP4);
    a bf16/fp16/fp32 ``weight`` alone -> dense.
    """
    wname = name_of(prefix, "weight")
    if has(tensors, prefix, "_weight_qdata"):  # its layout is in the file's header, not in the names
        raise ValueError(f"{prefix!r} is written by torchao (a '_weight_qdata' tensor): read it with "
                         "lowbit.io.read_torchao(ck.tensors, prefix, ck.quant_config) on a load_checkpoint result")
    if has(tensors, prefix, "weight_packed"):
        p = tensors[name_of(prefix, "weight_packed")]
        sc = tensors.get(name_of(prefix, "weight_scale"))
        if has(tensors, prefix, "weight_global_scale") and p.dtype == torch.uint8 and (sc is None or sc.dtype == torch.float8_e4m3fn):
            return NVFP4_CT
        if has(tensors, prefix, "weight_shape") and not has(tensors, prefix, "weight_global_scale"):
            return INT_CT
        if (p.dtype == torch.uint8 and sc is not None and sc.dtype in (torch.uint8, torch.float8_e8m0fnu)
                and not has(tensors, prefix, "weight_global_scale")):
            return MXFP4_CT
        raise ValueError(f"layer {prefix!r} holds {_ct_packed_layout(tensors, prefix)}, which lowbit does not read. "
                         f"lowbit reads: {READS}")
    require(wname in tensors, f"checkpoint has neither {wname!r} nor {name_of(prefix, 'weight_packed')!r}")
    w = tensors[wname]
    if has(tensors, prefix, "weight_scale_2"):
        return NVFP4_MODELOPT
    if w.dtype == torch.float8_e4m3fn:
        if has(tensors, prefix, "weight_scale"):
            strategy = ct.fp8_strategy(tensors, prefix)
            return {"tensor": FP8_TENSOR_CT, "channel": FP8_ROW_CT, "block": FP8_BLOCK_CT}[strategy]
        if any(has(tensors, prefix, s) for s in ds.FP8_SCALE_NAMES):
            return FP8_BLOCK_DEEPSEEK
        raise ValueError(f"{wname!r} is float8_e4m3fn but no scale was found (looked for weight_scale, weight_scale_inv, scale). "
                         f"lowbit reads: {READS}")
    if w.dtype in ds._FP4_WEIGHT_DTYPES and any(has(tensors, prefix, s) for s in ds.FP4_SCALE_NAMES):
        return MXFP4_DEEPSEEK
    if w.dtype in _DENSE_DTYPES:
        return DENSE
    others = [f"{s} {_desc(tensors[name_of(prefix, s)])}" for s in ("weight_scale", "weight_scale_inv", "scale", "weight_zero_point")
              if has(tensors, prefix, s)]
    raise ValueError(f"{wname!r} is {_desc(w)}" + (f" with {', '.join(others)}" if others else "")
                     + f", which matches no checkpoint layout lowbit reads. lowbit reads: {READS}")


@dataclasses.dataclass(frozen=True)
class Layer:
    """One layer read from a checkpoint.

    ``fmt``: the lowbit format (:class:`~lowbit.formats.NVFP4`, :class:`~lowbit.formats.FP8`,
    :class:`~lowbit.formats.MXFP4`, :class:`~lowbit.formats.INTx`) or, for ``DENSE``, the weight tensor itself. ``variant``: which
    checkpoint layout it came from (one of :data:`VARIANTS`). ``options``: the writer's keyword
    arguments that reproduce the stored bytes (scale names and dtypes, scalar shapes, the stored
    compressed-tensors inverse global scale, activation scales).
    """

    fmt: Any
    variant: str
    options: dict = dataclasses.field(default_factory=dict)

    @property
    def global_scale_source(self) -> str | None:
        """For NVFP4: which tensor the multiplier came from (and whether it was inverted)."""
        if self.variant == NVFP4_MODELOPT:
            return "weight_scale_2 (multiplier)"
        if self.variant == NVFP4_CT:
            return "weight_global_scale (inverse, normalised to 1/x)"
        return None


def _shape_of(t: torch.Tensor | None) -> tuple:
    return () if t is None else tuple(t.shape)


def read_layer(tensors: Mapping[str, torch.Tensor], prefix: str) -> Layer:
    """Detect and read the layer under ``prefix``; :func:`write_layer` writes it back bit-exact."""
    variant = detect_format(tensors, prefix)
    if variant == NVFP4_MODELOPT:
        fmt = mo.read_nvfp4(tensors, prefix)
        inp = mo.read_input_scale(tensors, prefix)
        opts = {"scalar_shape": _shape_of(tensors[name_of(prefix, "weight_scale_2")]), "input_scale": inp}
        if inp is not None:
            require(tuple(inp.shape) == opts["scalar_shape"], f"{name_of(prefix, 'input_scale')!r} has shape {tuple(inp.shape)} but weight_scale_2 has {opts['scalar_shape']}")
        return Layer(fmt, variant, opts)
    if variant == NVFP4_CT:
        fmt = ct.read_nvfp4_ct(tensors, prefix)
        wgs = get_scalar(tensors, prefix, "weight_global_scale")
        inp = mo.read_input_scale(tensors, prefix, "input_global_scale")
        if inp is not None:
            require(tuple(inp.shape) == tuple(wgs.shape), f"{name_of(prefix, 'input_global_scale')!r} has shape {tuple(inp.shape)} but weight_global_scale has {tuple(wgs.shape)}")
        return Layer(fmt, variant, {"weight_global_scale": wgs, "input_global_scale": inp, "scalar_shape": tuple(wgs.shape)})
    if variant == MXFP4_CT:
        return Layer(ct.read_mxfp4_ct(tensors, prefix), variant, {"scale_dtype": tensors[name_of(prefix, "weight_scale")].dtype})
    if variant == INT_CT:
        return Layer(ct.read_int_ct(tensors, prefix), variant,
                     {"symmetric": not has(tensors, prefix, "weight_zero_point"), "scale_dtype": tensors[name_of(prefix, "weight_scale")].dtype})
    if variant in (FP8_ROW_CT, FP8_TENSOR_CT, FP8_BLOCK_CT):
        fmt = ct.read_fp8_ct(tensors, prefix)
        inp = mo.read_input_scale(tensors, prefix)
        opts = {"input_scale": inp, "scalar_shape": _shape_of(inp), "scale_dtype": tensors[name_of(prefix, "weight_scale")].dtype}
        if variant == FP8_TENSOR_CT:
            opts["scale_shape"] = _shape_of(tensors[name_of(prefix, "weight_scale")])
        return Layer(fmt, variant, opts)
    if variant == FP8_BLOCK_DEEPSEEK:
        fmt = ds.read_fp8_block(tensors, prefix)
        sname = [s for s in ds.FP8_SCALE_NAMES if has(tensors, prefix, s)][0]
        return Layer(fmt, variant, {"scale_name": sname, "scale_dtype": tensors[name_of(prefix, sname)].dtype})
    if variant == MXFP4_DEEPSEEK:
        fmt = ds.read_fp4_experts(tensors, prefix)
        sname = [s for s in ds.FP4_SCALE_NAMES if has(tensors, prefix, s)][0]
        return Layer(fmt, variant, {"weight_dtype": tensors[name_of(prefix, "weight")].dtype,
                                    "scale_dtype": tensors[name_of(prefix, sname)].dtype, "scale_name": sname})
    return Layer(get(tensors, prefix, "weight", dtypes=_DENSE_DTYPES), DENSE, {})


_WRITERS = {
    NVFP4_MODELOPT: mo.write_nvfp4,
    NVFP4_CT: ct.write_nvfp4_ct,
    FP8_ROW_CT: ct.write_fp8_channel,
    FP8_TENSOR_CT: ct.write_fp8_ct,
    FP8_BLOCK_CT: ct.write_fp8_ct,
    FP8_BLOCK_DEEPSEEK: ds.write_fp8_block,
    MXFP4_DEEPSEEK: ds.write_fp4_experts,
    MXFP4_CT: ct.write_mxfp4_ct,
    INT_CT: ct.write_int_ct,
}


def write_layer(layer: Layer, prefix: str) -> dict[str, torch.Tensor]:
    """The checkpoint tensors of ``layer`` under ``prefix``, in its own variant's names."""
    require(isinstance(layer, Layer), f"write_layer needs a Layer, got {type(layer).__name__}")
    require(layer.variant in VARIANTS, f"unknown variant {layer.variant!r}; expected one of {VARIANTS}")
    if layer.variant == DENSE:
        return {name_of(prefix, "weight"): layer.fmt.contiguous()}
    return _WRITERS[layer.variant](layer.fmt, prefix, **layer.options)
