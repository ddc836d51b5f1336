"""lowbit.nn.Linear: dispatch by weight dtype, from_float, bias, leading dims."""
from __future__ import annotations

import pytest
import torch

from lowbit.nn.linear import Linear
from lowbit.ops.act_quant.reference import act_quant_ref
from tests._helpers import rel_err


@pytest.mark.parametrize("fmt", ["fp8", "fp4", "bf16"])
@pytest.mark.parametrize("bias", [False, True])
def test_linear_matches_dequantized(backend, fmt, bias):
    lin = torch.nn.Linear(256, 72, bias=bias)
    mod = Linear.from_float(lin, fmt).to(backend.device)
    x = torch.randn(2, 3, 256, dtype=torch.bfloat16)
    with backend.active():
        y = mod(x.to(backend.device))
    assert y.shape == (2, 3, 72) and y.dtype == torch.bfloat16
    # fp64 reference over the exact operands the GEMM sees (quantized activations for fp8/fp4)
    if fmt == "bf16":
        xa = x.double()
    else:
        q, s = act_quant_ref(x, 128)
        xa = (q.double().unflatten(-1, (-1, 128)) * s.double().unsqueeze(-1)).flatten(-2)
    want = xa @ mod.dequantized_weight(torch.float64).cpu().T
    if bias:
        want = want + mod.bias.detach().cpu().double()
    assert rel_err(y, want) < 2.0**-7
    # and the quantized layer is still close to the float one (E4M3: ~3%, MXFP4: ~15% per output)
    assert rel_err(y, lin(x.float()).detach()) < {"fp8": 0.06, "fp4": 0.25, "bf16": 0.01}[fmt]


def test_linear_dispatch_and_storage():
    lin = torch.nn.Linear(128, 16)
    assert Linear.from_float(lin, "fp8").weight.dtype == torch.float8_e4m3fn
    m4 = Linear.from_float(lin, "fp4")
    assert m4.weight.dtype == torch.uint8 and m4.weight.shape == (16, 64) and m4.scale.shape == (16, 4)
    assert Linear(128, 16, dtype=torch.float4_e2m1fn_x2).fmt == "fp4"
    assert Linear.from_float(lin, "bf16").scale is None


def test_linear_validation():
    with pytest.raises(ValueError, match="in_features % 128"):
        Linear(100, 16, dtype=torch.float8_e4m3fn)
    with pytest.raises(ValueError, match="fmt"):
        Linear.from_float(torch.nn.Linear(128, 16), "int4")
    m = Linear.from_float(torch.nn.Linear(128, 16), "fp8")
    with pytest.raises(ValueError, match="expected"):
        m(torch.randn(2, 64))


@pytest.mark.cuda
@pytest.mark.parametrize("fmt", ["fp8", "fp4"])
def test_cuda_linear_compile(fmt):
    mod = Linear.from_float(torch.nn.Linear(512, 256, bias=True), fmt).cuda()
    x = torch.randn(4, 512, device="cuda", dtype=torch.bfloat16)
    f = torch.compile(mod, fullgraph=True)
    assert torch.equal(f(x), mod(x))
