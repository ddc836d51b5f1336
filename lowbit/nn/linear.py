"""``lowbit.nn.Linear``: a linear layer whose weight may be FP8 (128x128 block scales) or packed FP4.

Dispatch by the weight's dtype (SPEC.md §5):

* packed FP4 (uint8 ``[N, K/2]``, or ``torch.float4_e2m1fn_x2``) with UE8M0 1x32 scales
  ``[N, K/32]`` -> ``act_quant`` (1x128) + ``fp4_gemm``;
* ``float8_e4m3fn [N, K]`` with fp32 (or UE8M0) 128x128 scales -> ``act_quant`` + ``fp8_gemm``;
* anything else -> ``F.linear``.

FP4 weights are *stored* as uint8 bytes and their scales as uint8 UE8M0 exponent bytes: torch
treats ``float4_e2m1fn_x2`` and ``float8_e8m0fnu`` as floating point, so ``module.to(bf16)`` would
try to cast them (and fails for float4). FP8 weights are e4m3; ``module.to(dtype)`` casts those
too, exactly as it would cast any floating parameter, so move a quantized module with
``module.to(device)`` only.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from lowbit._validate import check_bool, check_int, check_tensor, require

_FP4X2 = getattr(torch, "float4_e2m1fn_x2", None)
_FP4_DTYPES = (torch.uint8,) + ((_FP4X2,) if _FP4X2 is not None else ())
FMTS = ("fp8", "fp4", "bf16")


class Linear(nn.Module):
    """``y = x @ W^T + bias`` for ``x [..., in_features]``.

    Args:
        in_features, out_features: K and N.
        bias: add a bias ``[N]`` (bf16 unless ``dtype`` is a float dtype).
        dtype: the weight's storage: ``torch.float8_e4m3fn`` (FP8, scale fp32
            ``[ceil(N/128), ceil(K/128)]``), ``torch.uint8`` / ``torch.float4_e2m1fn_x2`` (packed FP4,
            weight uint8 ``[N, K/2]``, scale uint8 UE8M0 ``[N, K/32]``), or a float dtype (dense;
            default ``torch.get_default_dtype()``).
        scale_fmt: activation scale rule for ``act_quant`` (``None`` or ``"ue8m0"``).

    ``in_features`` must be an int >= 1 and ``out_features`` an int >= 0 (``ValueError``
    otherwise); N = 0 and a batch of 0 rows give empty outputs.

    Quantized weights need K % 128 == 0 (the activation groups are 1x128). The forward returns
    bf16 for quantized weights (the GEMMs' output) and ``x.dtype`` results of ``F.linear`` otherwise.
    Parameters are created uninitialised (``torch.empty``): load a checkpoint or use
    :meth:`from_float`.
    """

    block_size = 128

    def __init__(self, in_features: int, out_features: int, bias: bool = False, dtype: torch.dtype | None = None,
                 device=None, scale_fmt: str | None = None):
        super().__init__()
        check_int("in_features", in_features, minimum=1)
        check_int("out_features", out_features, minimum=0)
        check_bool("bias", bias)
        require(dtype is None or isinstance(dtype, torch.dtype), f"dtype must be a torch.dtype or None, got {dtype!r}")
        require(scale_fmt is None or scale_fmt == "ue8m0", f"scale_fmt must be None or 'ue8m0', got {scale_fmt!r}")
        if device is not None:
            try:
                device = torch.device(device)
            except (RuntimeError, TypeError) as e:
                raise ValueError(f"device must be a torch.device, a device string or index, got {device!r}") from e
        self.in_features, self.out_features = in_features, out_features
        self.scale_fmt = scale_fmt
        dtype = dtype or torch.get_default_dtype()
        n, k = out_features, in_features
        if dtype in _FP4_DTYPES:
            require(k % 128 == 0, f"packed FP4 Linear needs in_features % 128 == 0, got {k}")
            self.weight = nn.Parameter(torch.empty(n, k // 2, dtype=torch.uint8, device=device), requires_grad=False)
            self.scale = nn.Parameter(torch.empty(n, k // 32, dtype=torch.uint8, device=device), requires_grad=False)
        elif dtype == torch.float8_e4m3fn:
            require(k % 128 == 0, f"FP8 Linear needs in_features % 128 == 0, got {k}")
            self.weight = nn.Parameter(torch.empty(n, k, dtype=dtype, device=device), requires_grad=False)
            self.scale = nn.Parameter(
                torch.empty(math.ceil(n / 128), math.ceil(k / 128), dtype=torch.float32, device=device), requires_grad=False)
        else:
            require(dtype.is_floating_point, f"dtype must be float8_e4m3fn, uint8/float4_e2m1fn_x2 (packed FP4) or a float dtype, got {dtype}")
            self.weight = nn.Parameter(torch.empty(n, k, dtype=dtype, device=device))
            self.register_parameter("scale", None)
        bias_dtype = dtype if dtype in (torch.float32, torch.float16, torch.bfloat16) else torch.bfloat16
        self.bias = nn.Parameter(torch.empty(n, dtype=bias_dtype, device=device)) if bias else None

    @property
    def fmt(self) -> str:
        if self.weight.dtype in _FP4_DTYPES:
            return "fp4"
        if self.weight.dtype == torch.float8_e4m3fn:
            return "fp8"
        return "bf16"

    @classmethod
    def from_float(cls, linear: nn.Linear, fmt: str, scale_fmt: str | None = None, rounding: str = "floor") -> "Linear":
        """Quantize an existing ``nn.Linear`` (weight ``[N, K]``, optional bias).

        ``fmt="fp8"``: E4M3 with fp32 128x128 block scales (``lowbit.formats.FP8``, granularity
        ``"block"``, ``scale = max(amax, 1e-4) / 448``). ``fmt="fp4"``: ``lowbit.formats.MXFP4``
        (E2M1, UE8M0 per 32) with the OCP ``"floor"`` scale rule by default (the block max lands in
        [4, 8) so values above 6 * 2^e saturate; ``rounding="ceil"`` never saturates but is coarser).
        ``fmt="bf16"``: a bf16 copy. ``scale_fmt`` is the activation-scale rule used at run time.
        """
        from lowbit.formats import FP8, MXFP4

        require(fmt in FMTS, f"fmt must be one of {FMTS}, got {fmt!r}")
        w = linear.weight.detach()
        check_tensor("linear.weight", w, ndim=2)
        n, k = w.shape
        has_bias = linear.bias is not None
        dtype = {"fp8": torch.float8_e4m3fn, "fp4": torch.uint8, "bf16": torch.bfloat16}[fmt]
        mod = cls(k, n, bias=has_bias, dtype=dtype, device=w.device, scale_fmt=scale_fmt)
        with torch.no_grad():
            if fmt == "fp8":
                q = FP8.quantize(w, "block", 128)
                mod.weight.copy_(q.data)
                mod.scale.copy_(q.scale)
            elif fmt == "fp4":
                q = MXFP4.quantize(w, rounding=rounding)
                mod.weight.copy_(q.packed)
                mod.scale.copy_(q.scale)
            else:
                mod.weight.copy_(w.to(torch.bfloat16))
            if has_bias:
                mod.bias.copy_(linear.bias.detach().to(mod.bias.dtype))
        return mod

    def dequantized_weight(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The weight as a dense ``[N, K]`` tensor (for tests and debugging)."""
        if self.fmt == "fp4":
            from lowbit.ops.fp4_gemm.reference import fp4_weight_dequant_ref

            return fp4_weight_dequant_ref(self.weight, self.scale).to(dtype)
        if self.fmt == "fp8":
            from lowbit.ops.act_quant.reference import weight_dequant_ref

            return weight_dequant_ref(self.weight, self.scale, 128, dtype)
        return self.weight.to(dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        require(x.shape[-1] == self.in_features, f"x has shape {tuple(x.shape)}, expected [..., {self.in_features}]")
        fmt = self.fmt
        if fmt == "bf16":
            return F.linear(x, self.weight, self.bias)
        from lowbit.ops.act_quant import act_quant

        x_q, x_s = act_quant(x, self.block_size, self.scale_fmt)
        if fmt == "fp4":
            from lowbit.ops.fp4_gemm import fp4_gemm

            y = fp4_gemm(x_q, x_s, self.weight, self.scale)
        else:
            from lowbit.ops.fp8_gemm import fp8_gemm

            y = fp8_gemm(x_q, x_s, self.weight, self.scale)
        if self.bias is not None:
            y = y + self.bias.to(y.dtype)
        return y

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, fmt={self.fmt}, bias={self.bias is not None}"
