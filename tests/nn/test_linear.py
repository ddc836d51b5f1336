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


# ---- constructor arguments and empty shapes (issue #49 items 4 and 7) --------------------------

@pytest.mark.parametrize("kwargs, match", [
    (dict(in_features=0, out_features=64), "in_features must be >= 1"),
    (dict(in_features=-128, out_features=64), "in_features must be >= 1"),
    (dict(in_features=128, out_features=-1), "out_features must be >= 0"),
    (dict(in_features=128.0, out_features=64), "in_features must be an int"),
    (dict(in_features=True, out_features=64), "in_features must be an int"),
    (dict(in_features=128, out_features="64"), "out_features must be an int"),
    (dict(in_features=128, out_features=torch.tensor(64)), "out_features must be an int"),
    (dict(in_features=128, out_features=64, bias="yes"), "bias must be a bool"),
    (dict(in_features=128, out_features=64, dtype="fp8"), "dtype must be a torch.dtype"),
    (dict(in_features=128, out_features=64, scale_fmt="foo"), "scale_fmt must be None or 'ue8m0'"),
    (dict(in_features=128, out_features=64, device="nowhere"), "device must be"),
])
def test_constructor_refuses_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Linear(**kwargs)


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.uint8, torch.bfloat16])
@pytest.mark.parametrize("m, n", [(0, 64), (3, 0), (0, 0)])
def test_empty_batch_or_outputs(backend, dtype, m, n):
    """A batch of 0 rows, or out_features = 0 (an empty expert): empty outputs on every path (the
    Triton GEMMs raised ZeroDivisionError)."""
    mod = Linear(128, n, dtype=dtype, device=backend.device)
    with torch.no_grad():
        mod.weight.zero_()
        if mod.scale is not None:
            mod.scale.fill_(1 if dtype == torch.float8_e4m3fn else 127)
    x = torch.randn(m, 128, device=backend.device, dtype=torch.bfloat16)
    with backend.active():
        y = mod(x)
    assert y.shape == (m, n)
