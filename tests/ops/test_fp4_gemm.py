"""fp4_gemm against an fp64 reference of the dequantized operands, on every tier."""
from __future__ import annotations

import pytest
import torch

from lowbit.formats import FP8, MXFP4
from lowbit.ops.fp4_gemm import fp4_gemm
from tests._helpers import rel_err
from tests.ops.test_fp8_gemm import opcheck_no_mutation

TOL = 2.0**-8  # bf16 output rounding dominates (see test_fp8_gemm)


def _operands(m, n, k, lead=()):
    a = FP8.quantize(torch.randn(*lead, m, k), "group", 128)
    w = torch.randn(n, k) * 0.05
    w[:, :32] *= 300.0  # per-32 scales that differ by > 2^8 within one 128 block
    return a, MXFP4.quantize(w)


def _fp64_ref(a, b):
    return a.dequantize(torch.float64) @ b.dequantize(torch.float64).T


@pytest.mark.parametrize("m", [1, 3, 17, 130])
@pytest.mark.parametrize("n", [64, 96])
def test_fp4_gemm_vs_fp64(backend, m, n):
    a, b = _operands(m, n, 256)
    dev = backend.device
    with backend.active():
        c = fp4_gemm(a.data.to(dev), a.scale.to(dev), b.packed.to(dev), b.scale.to(dev))
    assert c.dtype == torch.bfloat16 and c.shape == (m, n)
    assert not torch.isnan(c).any()
    assert rel_err(c, _fp64_ref(a, b)) < TOL


def test_fp4_gemm_dtypes_and_leading_dims(backend):
    """float4_e2m1fn_x2 weights, float8_e8m0fnu weight scales, 3-D activations, N at a tile edge."""
    a, b = _operands(3, 65, 256, lead=(2,))
    dev = backend.device
    packed = b.packed.view(torch.float4_e2m1fn_x2)
    with backend.active():
        c = fp4_gemm(a.data.to(dev), a.scale.to(dev), packed.to(dev), b.scale.view(torch.float8_e8m0fnu).to(dev))
    assert c.shape == (2, 3, 65)
    assert rel_err(c, _fp64_ref(a, b)) < TOL


def test_fp4_gemm_split_k(backend):
    if not backend.is_triton:
        pytest.skip("split-K is a Triton launch parameter; the reference has none")
    from lowbit.ops.fp4_gemm import triton as tr

    a, b = _operands(2, 64, 384)
    dev = backend.device
    with backend.active():
        c = tr.fp4_gemm(a.data.to(dev), a.scale.to(dev), b.packed.to(dev), b.scale.to(dev), split_k=2)
    assert rel_err(c, _fp64_ref(a, b)) < TOL


def test_fp4_gemm_validation():
    a, b = _operands(2, 64, 256)
    with pytest.raises(ValueError, match="packed b has shape"):
        fp4_gemm(a.data, a.scale, b.packed[:, :64], b.scale)
    with pytest.raises(ValueError, match="b_s has shape"):
        fp4_gemm(a.data, a.scale, b.packed, b.scale[:, :4])
    with pytest.raises(ValueError, match="dtype"):
        fp4_gemm(a.data, a.scale, b.packed, b.scale.float())
    with pytest.raises(ValueError, match="multiple of 128"):
        fp4_gemm(torch.zeros(1, 64, dtype=torch.float8_e4m3fn), torch.ones(1, 0), b.packed[:, :32], b.scale[:, :2])



def test_opcheck_cpu():
    """The registered op on CPU tensors (reference path): fake / autograd / AOT checks, no mutation."""
    a, b = _operands(5, 64, 256)
    opcheck_no_mutation(torch.ops.lowbit.fp4_gemm.default, [a.data, a.scale, b.packed, b.scale])


@pytest.mark.cuda
@pytest.mark.parametrize("m,n,k", [(1, 2112, 7168), (16, 4096, 1536), (130, 300, 1024), (1024, 2048, 2048)])
def test_cuda_shapes(m, n, k):
    a, b = _operands(m, n, k)
    c = fp4_gemm(a.data.cuda(), a.scale.cuda(), b.packed.cuda(), b.scale.cuda())
    assert rel_err(c, _fp64_ref(a, b)) < TOL


@pytest.mark.cuda
def test_cuda_compile_opcheck_graph():
    a, b = _operands(16, 256, 512)
    args = [t.cuda() for t in (a.data, a.scale, b.packed, b.scale)]
    opcheck_no_mutation(torch.ops.lowbit.fp4_gemm.default, args)
    f = torch.compile(fp4_gemm, fullgraph=True)
    assert torch.equal(f(*args), fp4_gemm(*args))
    static = [t.clone() for t in args]
    fp4_gemm(*static)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fp4_gemm(*static)
    a2, _ = _operands(16, 256, 512)
    static[0].copy_(a2.data.cuda())
    static[1].copy_(a2.scale.cuda())
    graph.replay()
    assert rel_err(out, _fp64_ref(a2, b)) < TOL
