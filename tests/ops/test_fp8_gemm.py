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
    from lowbit.ops.fp8_gemm import tiled

    a, b = _operands(3, 80, 384)
    dev = backend.device
    with backend.active():
        c = tiled.fp8_gemm_tiled(a.data.to(dev), a.scale.to(dev), b.data.to(dev), b.scale.to(dev), split_k=split_k)
    assert rel_err(c, _fp64_ref(a, b)) < TOL


@pytest.mark.parametrize("swap_ab", [True, False])
def test_fp8_gemm_tile_orientations(backend, swap_ab):
    """Both tile orientations of the tiled kernel, over split-K ranges that end before the last
    block (the scales of the next block are loaded one iteration ahead, clamped at the end)."""
    if not backend.is_triton:
        pytest.skip("a Triton launch parameter")
    from lowbit.ops.fp8_gemm import tiled

    a, b = _operands(3, 80, 384)
    dev = backend.device
    args = (a.data.to(dev), a.scale.to(dev), b.data.to(dev), b.scale.to(dev))
    with backend.active():
        c = tiled.fp8_gemm_tiled(*args, split_k=2, config=tiled.GemmConfig(16, 64, 4, 2, swap_ab))
    assert rel_err(c, _fp64_ref(a, b)) < TOL


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


# ---- the dispatch table ---------------------------------------------------------------------

def _route(m, n, k, arch=(9, 0), **kw):
    from lowbit.ops.fp8_gemm import dispatch

    return dispatch.route(dispatch.Problem(m, n, k, arch, 132, True, **kw))


def test_dispatch_routes():
    """Which kernel serves which M (H200: 132 SMs, aligned operands): the table's bands."""
    kernel = lambda *a, **kw: _route(*a, **kw)[0].kernel  # noqa: E731
    assert [kernel(m, 7168, 2048) for m in (1, 8, 9, 16, 17, 32, 33, 64, 65, 511, 512, 4096)] == [
        "mma_gemv", "mma_gemv", "wgmma_gemv", "wgmma_gemv", "wgmma_gemm", "wgmma_gemm", "wgmma_gemm", "wgmma_gemm",
        "tiled", "tiled", "wgmma_gemm", "wgmma_gemm"]
    # M = 17..32 only for a short weight; too few (N2112: 33) or too many (N24576: 384) 64-row tiles
    assert kernel(17, 7168, 16384) == "tiled" and kernel(33, 7168, 16384) == "wgmma_gemm"
    assert kernel(64, 2112, 7168) == "tiled" and kernel(64, 24576, 1536) == "tiled"
    # no Gluon, an unaligned operand, a capture without counters, sm_89, the interpreter
    assert kernel(16, 7168, 2048, gluon=False) == "tiled" and kernel(4096, 7168, 2048, gluon=False) == "tiled"
    assert kernel(16, 7168, 2048, counters=False) == "tiled"
    assert kernel(1, 7168, 2048, scales_aligned=False) == "tiled"
    assert [kernel(m, 7168, 2048, arch=(8, 9)) for m in (1, 16, 64, 4096)] == ["mma_gemv", "tiled", "tiled", "tiled"]
    assert [kernel(m, 7168, 2048, arch=None) for m in (0, 1, 16, 4096)] == ["tiled"] * 4


def test_dispatch_configs():
    """The configuration each rule hands its kernel."""
    from lowbit.ops.fp8_gemm import mma_gemv, tiled, wgmma_gemm, wgmma_gemv

    assert _route(4096, 7168, 16384)[1] == wgmma_gemm.WgmmaGemmConfig(128, 128, 8, 5, 8, True, False)
    assert _route(512, 7168, 2048)[1] == wgmma_gemm.WgmmaGemmConfig(128, 128, 8, 4, 8, True, False)
    assert _route(64, 7168, 512)[1] == wgmma_gemm.WgmmaGemmConfig(64, 64, 4, 4, 8, False, True)
    assert _route(64, 7168, 16384)[1].stages == 8
    assert _route(16, 7168, 2048)[1] == wgmma_gemv.pick_config(7168, 2048, 16, 132)
    assert _route(1, 2112, 7168)[1] == mma_gemv.pick_config(2112, 7168, 1, fp4=False)
    assert _route(65, 7168, 2048)[1] == tiled.pick_config(65)  # 64 x 128 with TMA
    assert not _route(65, 7168, 2048, arch=(8, 9))[1].tma and not _route(65, 7168, 2048, arch=None)[1].tma
    assert not _route(1, 7168, 2048, arch=None)[1].tma


def test_dispatch_table_rows():
    """``dispatch_table()``: one row per rule, in order, with the fields ``lowbit info`` prints."""
    from lowbit.ops.fp8_gemm import dispatch

    rows = dispatch.dispatch_table()
    assert [r["kernel"] for r in rows] == [r.kernel for r in dispatch.RULES]
    assert rows[0]["m"] == "9-16" and rows[-1]["m"] == "any"
    assert all(set(r) == {"op", "kernel", "m", "gpu", "when", "config"} for r in rows)


def test_dispatch_on_cpu_tensors_is_the_tiled_kernel():
    """CPU tensors (the interpreter) never reach a GPU-only kernel."""
    from lowbit.ops.fp8_gemm import dispatch

    a = torch.zeros(512, 128, dtype=torch.float8_e4m3fn)
    b = torch.zeros(128, 128, dtype=torch.float8_e4m3fn)
    p = dispatch.problem(a, torch.ones(512, 1), b, torch.ones(1, 1))
    assert p.arch is None and dispatch.route(p)[0].kernel == "tiled"


# ---- the async-wgmma kernel (sm_90; wgmma_gemm.py) -------------------------------------------

def _gluon_or_skip():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("the Gluon kernel is sm_90 only (wgmma); the interpreter cannot run Gluon")
    from lowbit.ops.fp8_gemm import wgmma_gemm

    if wgmma_gemm.GLUON_ERROR is not None:
        pytest.skip(f"triton.experimental.gluon is not available: {wgmma_gemm.GLUON_ERROR}")
    return wgmma_gemm


@pytest.mark.cuda
@pytest.mark.parametrize("m,n,k", [(17, 256, 512), (130, 2112, 1024), (512, 100, 384), (300, 136, 128),
                                   (257, 520, 256), (1000, 384, 2048)])
@pytest.mark.parametrize("ws", [True, False])
@pytest.mark.parametrize("scale_fmt", [None, "ue8m0"])
def test_cuda_gluon_kernel(m, n, k, ws, scale_fmt):
    """Both forms of the kernel at tile edges (M, N not multiples of 128; N % 8 != 0 takes the
    masked store; K = 128..384: fewer K blocks than stages) with fp32 and UE8M0 scales, output
    pre-filled with NaN."""
    g = _gluon_or_skip()
    a, b = _operands(m, n, k, scale_fmt)
    a_s, b_s = a.scale, b.scale
    if scale_fmt == "ue8m0":
        a_s, b_s = a_s.to(torch.float8_e8m0fnu), b_s.to(torch.float8_e8m0fnu)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    args = (a.data.cuda(), a_s.cuda(), b.data.cuda(), b_s.cuda())
    for stages in (4, 5):
        cfg = g.WgmmaGemmConfig(stages=stages, group_m=8, warp_specialize=ws)
        c = g.fp8_gemm_wgmma(*args, cfg, out=out)
        assert not torch.isnan(c).any()
        assert rel_err(c, _fp64_ref(a, b)) < TOL
        if not ws:  # a programmatic dependent launch computes the same bits
            c = c.clone()
            out.fill_(float("nan"))
            assert torch.equal(g.fp8_gemm_wgmma(*args, cfg._replace(pdl=True), out=out), c)


def _graph_replay_ok(args, m, n, k, b):
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
    return rel_err(out, _fp64_ref(a2, b)) < TOL


@pytest.mark.cuda
def test_cuda_gluon_dispatch_compile_graph():
    """fp8_gemm takes the async-wgmma kernel at prefill sizes (and agrees with the tiled kernel);
    torch.compile and CUDA-graph capture / replay on that path."""
    _gluon_or_skip()
    from lowbit.ops.fp8_gemm import dispatch, tiled

    m, n, k = dispatch.PREFILL_MIN_M, 384, 1024
    a, b = _operands(m, n, k)
    args = [t.cuda() for t in (a.data, a.scale, b.data, b.scale)]
    assert dispatch.route(dispatch.problem(*args))[0].kernel == "wgmma_gemm"
    c = fp8_gemm(*args)
    assert rel_err(c, _fp64_ref(a, b)) < TOL
    assert rel_err(tiled.fp8_gemm_tiled(*args), _fp64_ref(a, b)) < TOL
    f = torch.compile(fp8_gemm, fullgraph=True)
    assert torch.equal(f(*args), c)
    assert _graph_replay_ok(args, m, n, k, b)


@pytest.mark.cuda
@pytest.mark.parametrize("m,n,k", [(33, 7057, 1024), (64, 7168, 2048), (47, 6600, 128), (64, 7000, 16384),
                                   (40, 2112, 1024), (17, 7168, 2048), (32, 7057, 1024)])
def test_cuda_decode_gluon_band(m, n, k):
    """M in the decode band with 3/4 SMs..SMs row tiles of 64 runs the async-wgmma kernel with
    64 x 64 tiles (N edges, K of one block: no persistence; N = 2112 stays on the tiled kernel),
    NaN-poisoned output fully written; the tiled kernel agrees; it captures in a CUDA graph."""
    g = _gluon_or_skip()
    from lowbit.ops.fp8_gemm import dispatch, tiled

    a, b = _operands(m, n, k)
    args = [t.cuda() for t in (a.data, a.scale, b.data, b.scale)]
    rule, cfg = dispatch.route(dispatch.problem(*args))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    assert (rule.kernel == "wgmma_gemm") == (3 * sms // 4 <= -(-n // 64) <= sms)
    if sms == 132:  # the H200: every case but N = 2112 is in the band
        assert (rule.kernel == "wgmma_gemm") == (n != 2112)
    if rule.kernel == "wgmma_gemm":
        out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        c = g.fp8_gemm_wgmma(*args, cfg, out=out)
        assert not torch.isnan(c).any() and torch.equal(c, fp8_gemm(*args))
    assert rel_err(fp8_gemm(*args), _fp64_ref(a, b)) < TOL
    assert rel_err(tiled.fp8_gemm_tiled(*args), _fp64_ref(a, b)) < TOL
    assert _graph_replay_ok(args, m, n, k, b)


# ---- the tuners beside the launch tables (``lowbit tune <op>``) ---------------------------------

TUNED_OPS = ["fp8_gemm", "fp4_gemm", "act_quant", "gathered", "sparse_attn", "hc_sinkhorn"]


@pytest.mark.parametrize("op", TUNED_OPS)
def test_tuner_help_and_no_gpu(op, capsys):
    """Each op's tuner imports without a GPU, prints its help (exit 0), and without CUDA says so
    and returns 2 instead of raising."""
    import importlib

    tune = importlib.import_module(f"lowbit.ops.{op}.tune")
    with pytest.raises(SystemExit) as e:
        tune.main(["--help"])
    assert e.value.code == 0 and f"lowbit tune {op}" in capsys.readouterr().out
    if not torch.cuda.is_available():
        assert tune.main([]) == 2
        assert "needs a CUDA GPU" in capsys.readouterr().out


# ---- empty shapes (issue #49 item 4): M = 0 / N = 0 give an empty result with no launch ---------

@pytest.mark.parametrize("lead, n", [((0,), 64), ((4,), 0), ((0,), 0), ((2, 0), 256), ((3, 2), 0)])
def test_empty_m_or_n(backend, poison_empty, lead, n):
    """Empty MoE experts: the Triton path picked split-K (dividing by the tile count) before its
    empty early return and raised ZeroDivisionError."""
    dev = backend.device
    a = torch.zeros(*lead, 256, device=dev).to(torch.float8_e4m3fn)
    a_s = torch.ones(*lead, 2, device=dev)
    b = torch.zeros(n, 256, device=dev).to(torch.float8_e4m3fn)
    b_s = torch.ones(-(-n // 128), 2, device=dev)
    with backend.active():
        c = fp8_gemm(a, a_s, b, b_s)
    assert c.shape == (*lead, n) and c.dtype == torch.bfloat16 and c.numel() == 0


def test_zero_k_refused(backend):
    dev = backend.device
    a = torch.zeros(4, 0, device=dev).to(torch.float8_e4m3fn)
    b = torch.zeros(64, 0, device=dev).to(torch.float8_e4m3fn)
    with backend.active(), pytest.raises(ValueError, match=r"K = a.shape\[-1\] = 0 must be a positive multiple of 128"):
        fp8_gemm(a, torch.ones(4, 0, device=dev), b, torch.ones(1, 0, device=dev))
