"""fp8_gemm against an fp64 reference of the dequantized operands, on every tier."""
from __future__ import annotations

import pytest
import torch

from lowbit.formats import FP8
from lowbit.ops.fp8_gemm import fp8_gemm
from lowbit.ops.fp8_gemm.reference import fp8_gemm_ref
from tests._helpers import rel_err

# fp32 two-level accumulation vs fp64 is ~1e-6; the bf16 output rounding (2^-9 relative per
# element) dominates: the norm-wise relative error stays below 2^-8.
TOL = 2.0**-8


# opcheck's test_schema (SchemaCheckMode) compares inputs before / after with a multiply that torch
# does not implement for float8 tensors (CPU and CUDA alike), so it is replaced here by an explicit
# check that no input was mutated; the other opcheck utils run as usual.
OPCHECK_UTILS = ("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")


def opcheck_no_mutation(op, args):
    before = [t.clone() for t in args]
    torch.library.opcheck(op, args, test_utils=OPCHECK_UTILS)
    op(*args)
    for t, t0 in zip(args, before):
        assert torch.equal(t.view(torch.uint8), t0.view(torch.uint8)), "an input was mutated"


def _operands(m, n, k, scale_fmt=None, lead=()):
    a = FP8.quantize(torch.randn(*lead, m, k), "group", 128, scale_fmt)
    b = FP8.quantize(torch.randn(n, k) * 0.05, "block", 128, scale_fmt)
    return a, b


def _fp64_ref(a: FP8, b: FP8):
    return a.dequantize(torch.float64) @ b.dequantize(torch.float64).T


@pytest.mark.parametrize("m", [1, 3, 17, 130])
@pytest.mark.parametrize("n", [96, 130])
def test_fp8_gemm_vs_fp64(backend, m, n):
    a, b = _operands(m, n, 256)
    dev = backend.device
    with backend.active():
        c = fp8_gemm(a.data.to(dev), a.scale.to(dev), b.data.to(dev), b.scale.to(dev))
    assert c.dtype == torch.bfloat16 and c.shape == (m, n)
    assert not torch.isnan(c).any()
    assert rel_err(c, _fp64_ref(a, b)) < TOL


def test_fp8_gemm_e8m0_scales_and_leading_dims(backend):
    a, b = _operands(5, 64, 256, "ue8m0", lead=(2,))
    dev = backend.device
    a_s = a.scale.to(torch.float8_e8m0fnu)
    b_s = b.scale.to(torch.float8_e8m0fnu)
    with backend.active():
        c = fp8_gemm(a.data.to(dev), a_s.to(dev), b.data.to(dev), b_s.to(dev))
    assert c.shape == (2, 5, 64)
    assert rel_err(c, _fp64_ref(a, b)) < TOL


@pytest.mark.parametrize("split_k", [1, 2, 3])
def test_fp8_gemm_split_k_matches(backend, split_k):
    """Every split-K factor (incl. one that does not divide K/128 = 3) gives the same answer."""
    if not backend.is_triton:
        pytest.skip("split-K is a Triton launch parameter; the reference has none")
    from lowbit.ops.fp8_gemm import triton as tr

    a, b = _operands(3, 80, 384)
    dev = backend.device
    with backend.active():
        c = tr.fp8_gemm(a.data.to(dev), a.scale.to(dev), b.data.to(dev), b.scale.to(dev), split_k=split_k)
    assert rel_err(c, _fp64_ref(a, b)) < TOL


@pytest.mark.parametrize("swap_ab", [True, False])
def test_fp8_gemm_without_scale_prefetch(backend, swap_ab):
    """Loading each block's scales where they are used (PREFETCH off) and one iteration ahead (the
    default) give the same bits, over split-K ranges that end before the last block."""
    if not backend.is_triton:
        pytest.skip("a Triton launch parameter")
    from lowbit.ops.fp8_gemm import triton as tr

    a, b = _operands(3, 80, 384)
    dev = backend.device
    args = (a.data.to(dev), a.scale.to(dev), b.data.to(dev), b.scale.to(dev))
    with backend.active():
        on = tr.fp8_gemm(*args, split_k=2, config=tr.GemmConfig(16, 64, 4, 2, swap_ab))
        off = tr.fp8_gemm(*args, split_k=2, config=tr.GemmConfig(16, 64, 4, 2, swap_ab, prefetch=False))
    assert torch.equal(on, off)
    assert rel_err(on, _fp64_ref(a, b)) < TOL


def test_fp8_gemm_reference_two_level():
    """The reference applies the scales per K block: a per-block scale change moves only that block."""
    a, b = _operands(4, 32, 256)
    s = a.scale.clone()
    s[:, 1] *= 4
    c = fp8_gemm_ref(a.data, s, b.data, b.scale).double()
    want = FP8(a.data, s, "group", 128).dequantize(torch.float64) @ b.dequantize(torch.float64).T
    assert rel_err(c, want) < TOL


def test_fp8_gemm_validation():
    a, b = _operands(2, 64, 256)
    with pytest.raises(ValueError, match="multiple of 128"):
        fp8_gemm(torch.zeros(2, 200, dtype=torch.float8_e4m3fn), torch.ones(2, 1), torch.zeros(64, 200, dtype=torch.float8_e4m3fn), torch.ones(1, 1))
    with pytest.raises(ValueError, match="a_s has shape"):
        fp8_gemm(a.data, a.scale[:, :1], b.data, b.scale)
    with pytest.raises(ValueError, match="b_s has shape"):
        fp8_gemm(a.data, a.scale, b.data, b.scale[:, :1])
    with pytest.raises(ValueError, match="dtype"):
        fp8_gemm(a.data.float(), a.scale, b.data, b.scale)
    with pytest.raises(ValueError, match="b has shape"):
        fp8_gemm(a.data, a.scale, b.data[:, :128], b.scale)



def test_opcheck_cpu():
    """The registered op on CPU tensors (reference path): fake / autograd / AOT checks, no mutation."""
    a, b = _operands(5, 64, 256)
    opcheck_no_mutation(torch.ops.lowbit.fp8_gemm.default, [a.data, a.scale, b.data, b.scale])


@pytest.mark.cuda
@pytest.mark.parametrize("m,n,k", [(1, 2112, 7168), (64, 4096, 1536), (130, 300, 1024), (4096, 1024, 2048)])
def test_cuda_shapes(m, n, k):
    a, b = _operands(m, n, k)
    c = fp8_gemm(a.data.cuda(), a.scale.cuda(), b.data.cuda(), b.scale.cuda())
    assert rel_err(c, _fp64_ref(a, b)) < TOL


@pytest.mark.cuda
def test_cuda_compile_opcheck_graph():
    a, b = _operands(16, 256, 512)
    args = [t.cuda() for t in (a.data, a.scale, b.data, b.scale)]
    opcheck_no_mutation(torch.ops.lowbit.fp8_gemm.default, args)
    f = torch.compile(fp8_gemm, fullgraph=True)
    assert torch.equal(f(*args), fp8_gemm(*args))
    static = [t.clone() for t in args]
    fp8_gemm(*static)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fp8_gemm(*static)
    a2, _ = _operands(16, 256, 512)
    static[0].copy_(a2.data.cuda())
    static[1].copy_(a2.scale.cuda())
    graph.replay()
    assert rel_err(out, _fp64_ref(a2, b)) < TOL


# ---- the Gluon prefill kernel (sm_90; gluon.py) ----------------------------------------------

def _gluon_or_skip():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("the Gluon kernel is sm_90 only (wgmma); the interpreter cannot run Gluon")
    from lowbit.ops.fp8_gemm import gluon

    if not gluon.gluon_available():
        pytest.skip("triton.experimental.gluon is not available in this Triton")
    return gluon


@pytest.mark.cuda
@pytest.mark.parametrize("m,n,k", [(17, 256, 512), (130, 2112, 1024), (512, 100, 384), (300, 136, 128),
                                   (257, 520, 256), (1000, 384, 2048)])
@pytest.mark.parametrize("ws", [True, False])
@pytest.mark.parametrize("scale_fmt", [None, "ue8m0"])
def test_cuda_gluon_kernel(m, n, k, ws, scale_fmt):
    """Both Gluon variants at tile edges (M, N not multiples of 128; N % 8 != 0 takes the masked
    store; K = 128..384: fewer K blocks than stages) with fp32 and UE8M0 scales, output pre-filled
    with NaN."""
    gluon = _gluon_or_skip()
    a, b = _operands(m, n, k, scale_fmt)
    a_s, b_s = a.scale, b.scale
    if scale_fmt == "ue8m0":
        a_s, b_s = a_s.to(torch.float8_e8m0fnu), b_s.to(torch.float8_e8m0fnu)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    for stages in (4, 5):
        c = gluon.fp8_gemm_gluon(a.data.cuda(), a_s.cuda(), b.data.cuda(), b_s.cuda(), warp_specialize=ws,
                                 stages=stages, group_m=8, out=out)
        assert not torch.isnan(c).any()
        assert rel_err(c, _fp64_ref(a, b)) < TOL
        if not ws:  # a programmatic dependent launch computes the same bits
            c = c.clone()
            out.fill_(float("nan"))
            assert torch.equal(gluon.fp8_gemm_gluon(a.data.cuda(), a_s.cuda(), b.data.cuda(), b_s.cuda(),
                                                    stages=stages, group_m=8, pdl=True, out=out), c)


@pytest.mark.cuda
def test_cuda_gluon_dispatch_compile_graph(monkeypatch):
    """fp8_gemm takes the Gluon kernel from GLUON_MIN_M rows (and the Triton one below it, or with
    GLUON off): same results; torch.compile and CUDA-graph capture / replay on the Gluon path."""
    _gluon_or_skip()
    from lowbit.ops.fp8_gemm import gluon
    from lowbit.ops.fp8_gemm import triton as tr

    a, b = _operands(tr.GLUON_MIN_M, 384, 1024)
    args = [t.cuda() for t in (a.data, a.scale, b.data, b.scale)]
    calls = []
    real = gluon.fp8_gemm_gluon
    monkeypatch.setattr(gluon, "fp8_gemm_gluon", lambda *x, **kw: calls.append(1) or real(*x, **kw))
    c = fp8_gemm(*args)
    assert calls and rel_err(c, _fp64_ref(a, b)) < TOL
    monkeypatch.setattr(tr, "GLUON", False)
    calls.clear()
    c_triton = fp8_gemm(*args)
    assert not calls and rel_err(c_triton, _fp64_ref(a, b)) < TOL
    monkeypatch.setattr(tr, "GLUON", True)
    f = torch.compile(fp8_gemm, fullgraph=True)
    assert torch.equal(f(*args), c)
    static = [t.clone() for t in args]
    fp8_gemm(*static)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fp8_gemm(*static)
    a2, _ = _operands(tr.GLUON_MIN_M, 384, 1024)
    static[0].copy_(a2.data.cuda())
    static[1].copy_(a2.scale.cuda())
    graph.replay()
    assert rel_err(out, _fp64_ref(a2, b)) < TOL


def test_gluon_never_on_cpu_or_interpreter():
    """CPU tensors (and the interpreter) never reach the Gluon dispatch."""
    from lowbit.ops.fp8_gemm import triton as tr

    a = torch.zeros(tr.GLUON_MIN_M, 128, dtype=torch.float8_e4m3fn)
    assert not tr._gluon_ok(a, torch.zeros(128, 128, dtype=torch.float8_e4m3fn))


def test_decode_gluon_band_rule():
    """M = 33..64 always; M = 17..32 only for a short weight (<= SHORT_LAUNCH_BYTES); M <= 16 never."""
    from lowbit.ops.fp8_gemm import triton as tr

    assert tr.decode_gluon_band(64, 7168, 16384) and tr.decode_gluon_band(33, 7168, 16384)
    assert tr.decode_gluon_band(17, 7168, 2048) and tr.decode_gluon_band(32, 7168, 2048)
    assert not tr.decode_gluon_band(32, 7168, 16384) and not tr.decode_gluon_band(17, 7168, 16384)
    assert not tr.decode_gluon_band(16, 7168, 2048) and not tr.decode_gluon_band(65, 7168, 2048)


@pytest.mark.cuda
@pytest.mark.parametrize("m,n,k", [(33, 7057, 1024), (64, 7168, 2048), (47, 6600, 128), (64, 7000, 16384),
                                   (40, 2112, 1024), (17, 7168, 2048), (32, 7057, 1024)])
def test_cuda_decode_gluon_band(monkeypatch, m, n, k):
    """M in the decode band (``decode_gluon_band``) with 3/4 SMs..SMs row tiles of 64 runs the
    prefill Gluon kernel with 64 x 64 tiles (N edges, K of one block: no persistence; N = 2112
    keeps the Triton kernel), NaN-poisoned output fully written; the same call with GLUON off (the
    Triton kernel) agrees; it captures in a CUDA graph."""
    _gluon_or_skip()
    from lowbit.ops.fp8_gemm import gluon
    from lowbit.ops.fp8_gemm import triton as tr

    if not tr.decode_gluon_band(m, n, k):
        pytest.skip(f"M = {m} with a {n} x {k} weight is outside the decode band (DECODE_GLUON_M / _SHORT_M)")
    a, b = _operands(m, n, k)
    args = [t.cuda() for t in (a.data, a.scale, b.data, b.scale)]
    calls = []
    real = gluon.fp8_gemm_gluon
    monkeypatch.setattr(gluon, "fp8_gemm_gluon",
                        lambda *x, **kw: calls.append(1) or real(*x, **kw, out=torch.full((m, n), float("nan"),
                                                                                            dtype=torch.bfloat16,
                                                                                            device="cuda")))
    c = fp8_gemm(*args)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    assert bool(calls) == (3 * sms // 4 <= -(-n // 64) <= sms)
    if sms == 132:  # the H200: every case but N = 2112 is in the band
        assert bool(calls) == (n != 2112)
    assert not torch.isnan(c).any() and rel_err(c, _fp64_ref(a, b)) < TOL
    monkeypatch.setattr(tr, "GLUON", False)
    calls.clear()
    assert rel_err(fp8_gemm(*args), _fp64_ref(a, b)) < TOL and not calls
    monkeypatch.setattr(tr, "GLUON", True)
    static = [t.clone() for t in args]
    fp8_gemm(*static)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fp8_gemm(*static)
    a2, _ = _operands(m, n, k)
    static[0].copy_(a2.data.cuda())
    static[1].copy_(a2.scale.cuda())
    graph.replay()
    torch.cuda.synchronize()
    assert rel_err(out, _fp64_ref(a2, b)) < TOL
