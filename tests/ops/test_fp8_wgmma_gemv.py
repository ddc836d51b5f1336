"""The Gluon wgmma decode GEMV for fp8_gemm (``lowbit/ops/fp8_gemm/wgmma_gemv.py``), against an fp64
reference of the dequantized operands. GPU tier only: Gluon does not run under the interpreter
(``tests/sm90`` compiles it for sm_90 without a GPU)."""
from __future__ import annotations

import pytest
import torch

from lowbit.formats import FP8
from tests._helpers import poisoned, rel_err

TOL = 2.0**-8  # bf16 output rounding dominates (products exact, fp32 sums)


def _kernel_or_skip():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the FP8 wgmma GEMV is sm_90 only (Gluon, wgmma, TMA); the interpreter cannot run Gluon")
    from lowbit.ops.fp8_gemm import wgmma_gemv as g

    if g.GLUON_ERROR is not None:
        pytest.skip(f"triton.experimental.gluon is not available: {g.GLUON_ERROR}")
    return g


def _operands(m, n, k, seed=0, scale_fmt=None):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=gen)
    x[:, :128] *= 500.0  # activation block scales far apart along K
    w = torch.randn(n, k, generator=gen) * 0.05
    w[: n // 2, 128:256] *= 1e-3  # and weight block scales
    return FP8.quantize(x, "group", 128, scale_fmt), FP8.quantize(w, "block", 128, scale_fmt)


def _want(a, b):
    return a.dequantize(torch.float64) @ b.dequantize(torch.float64).T


def _run(g, a, b, config, nan_ok=False):
    m, n = a.data.shape[0], b.data.shape[0]
    out = poisoned((m, n), torch.bfloat16, "cuda")
    c = g.fp8_wgmma_gemv(a.data.cuda(), a.scale.cuda(), b.data.cuda(), b.scale.cuda(), config=config, out=out)
    assert c is out and (nan_ok or not torch.isnan(c).any())
    return c


# (m, n, k, (STAGES, SPLIT[, W])): every NB band (8, 16, 32, 64) and odd M inside them, N not a
# multiple of the CTA's rows (64 / 128) nor of the 128-row scale block, fewer blocks than the ring
# and more (TMA refills), splits with a short last split, the benchmark's K
CASES = [(1, 64, 128, (2, 1)), (3, 100, 1536, (4, 1)), (5, 130, 640, (1, 1)), (6, 64, 1152, (3, 1)), (8, 200, 2048, (2, 3)), (9, 300, 1024, (4, 2, 8)),
         (16, 136, 1536, (3, 4, 8)), (17, 520, 4096, (4, 1)), (33, 2112, 7168, (4, 7, 8)), (64, 200, 2048, (2, 5)),
         (64, 1000, 16384, (4, 8, 8)), (50, 7168, 1536, (4, 1, 8))]


@pytest.mark.cuda
@pytest.mark.parametrize("m,n,k,cfg", CASES)
def test_cuda_fp8_wgmma_gemv_vs_fp64(m, n, k, cfg):
    g = _kernel_or_skip()
    a, b = _operands(m, n, k)
    assert rel_err(_run(g, a, b, cfg), _want(a, b)) < TOL


@pytest.mark.cuda
@pytest.mark.parametrize("m,n,k", [(1, 2112, 7168), (16, 7168, 2048), (64, 4096, 7168), (40, 24576, 1536)])
def test_cuda_fp8_wgmma_gemv_default_config(m, n, k):
    g = _kernel_or_skip()
    a, b = _operands(m, n, k, seed=1)
    assert rel_err(_run(g, a, b, None), _want(a, b)) < TOL


@pytest.mark.cuda
def test_cuda_fp8_wgmma_gemv_fresh_inputs_and_counters():
    """Split launches leave their arrival counters at zero: many launches in a row on fresh
    random inputs each give the right answer."""
    g = _kernel_or_skip()
    for seed in range(6):
        a, b = _operands(24, 320, 2048, seed=seed)
        assert rel_err(_run(g, a, b, (3, 4)), _want(a, b)) < TOL


@pytest.mark.cuda
def test_cuda_fp8_wgmma_gemv_e8m0_scales():
    g = _kernel_or_skip()
    a, b = _operands(21, 260, 1024, scale_fmt="ue8m0")
    a8 = a.scale.to(torch.float8_e8m0fnu)
    b8 = b.scale.to(torch.float8_e8m0fnu)
    out = poisoned((21, 260), torch.bfloat16, "cuda")
    c = g.fp8_wgmma_gemv(a.data.cuda(), a8.cuda(), b.data.cuda(), b8.cuda(), config=(2, 3), out=out)
    assert rel_err(c, _want(a, b)) < TOL


@pytest.mark.cuda
@pytest.mark.parametrize("split", [1, 2])
def test_cuda_fp8_wgmma_gemv_nan_scale_poisons_its_block(split):
    """A NaN weight block scale makes exactly the outputs of its 128 rows NaN (as the reference)."""
    g = _kernel_or_skip()
    from lowbit.ops.fp8_gemm.reference import fp8_gemm_ref

    a, b = _operands(5, 300, 1024)
    scale = b.scale.clone()
    scale[1, 3] = float("nan")
    c = g.fp8_wgmma_gemv(a.data.cuda(), a.scale.cuda(), b.data.cuda(), scale.cuda(), config=(2, split)).cpu()
    ref = fp8_gemm_ref(a.data, a.scale, b.data, scale)
    assert torch.equal(torch.isnan(c), torch.isnan(ref))
    assert torch.isnan(c[:, 128:256]).all() and not torch.isnan(c[:, :128]).any()


@pytest.mark.cuda
def test_cuda_fp8_wgmma_gemv_graph_replay():
    """Capture a split launch in a CUDA graph, copy new inputs into the captured buffers, replay."""
    g = _kernel_or_skip()
    a, b = _operands(32, 384, 2048)
    args = [t.cuda() for t in (a.data, a.scale, b.data, b.scale)]
    out = torch.empty(32, 384, dtype=torch.bfloat16, device="cuda")
    g.fp8_wgmma_gemv(*args, config=(4, 2), out=out)  # compile and make the counters outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        g.fp8_wgmma_gemv(*args, config=(4, 2), out=out)
    a2, b2 = _operands(32, 384, 2048, seed=3)
    for dst, src in zip(args, (a2.data, a2.scale, b2.data, b2.scale)):
        dst.copy_(src)
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert rel_err(out, _want(a2, b2)) < TOL


def test_fp8_wgmma_gemv_checks():
    """Shapes it does not serve are ValueErrors before any launch."""
    from lowbit.ops.fp8_gemm import wgmma_gemv as g

    if g.GLUON_ERROR is not None:
        pytest.skip(f"triton.experimental.gluon is not available: {g.GLUON_ERROR}")
    a, b = _operands(65, 64, 256)
    with pytest.raises(ValueError, match="M <= 64"):
        g.fp8_wgmma_gemv(a.data, a.scale, b.data, b.scale)
    a, b = _operands(4, 64, 256)
    with pytest.raises(ValueError, match="b_s"):
        g.fp8_wgmma_gemv(a.data, a.scale, b.data, b.scale[:, :1].contiguous())
    with pytest.raises(ValueError, match="STAGES >= 1"):
        g.fp8_wgmma_gemv(a.data, a.scale, b.data, b.scale, config=(0, 1))
    with pytest.raises(ValueError, match="W in"):
        g.fp8_wgmma_gemv(a.data, a.scale, b.data, b.scale, config=(2, 1, 2))
    wide = torch.zeros(4, 512, dtype=a.data.dtype)
    with pytest.raises(ValueError, match="non-contiguous a$"):
        g.fp8_wgmma_gemv(wide[:, ::2], a.scale, b.data, b.scale)
    with pytest.raises(ValueError, match=r"out must be a contiguous bf16 \[4, 64\]"):
        g.fp8_wgmma_gemv(a.data, a.scale, b.data, b.scale, out=torch.empty(4, 64))


def test_fp8_wgmma_gemv_config_rule():
    """The default config: a ring of <= 4 slots, every split non-empty, 8 warps only when the
    128-row tiles alone give the GPU half a CTA an SM."""
    from lowbit.ops.fp8_gemm.wgmma_gemv import pick_config

    for n, k in [(2112, 7168), (24576, 1536), (7168, 16384), (4096, 7168), (7168, 2048), (64, 128)]:
        for m in (1, 16, 64):
            stages, split, w = pick_config(n, k, m)
            kb = k // 128
            per = -(-kb // split)
            assert 1 <= stages <= min(4, per) and (split - 1) * per < kb <= split * per
            assert w == (8 if -(-n // 128) >= 66 else 4)


@pytest.mark.cuda
def test_cuda_fp8_gemm_dispatches_to_wgmma_gemv(monkeypatch):
    """fp8_gemm takes the wgmma GEMV at M = 9..16 (not at M = 8 or 17); every route agrees with
    fp64; it captures in a CUDA graph."""
    g = _kernel_or_skip()
    from lowbit.ops import fp8_gemm

    calls = []
    real = g.fp8_wgmma_gemv
    monkeypatch.setattr(g, "fp8_wgmma_gemv", lambda *x, **kw: calls.append(x[0].shape[0]) or real(*x, **kw))
    for m in (8, 9, 16, 17):
        a, b = _operands(m, 1000, 2048, seed=m)
        c = fp8_gemm(a.data.cuda(), a.scale.cuda(), b.data.cuda(), b.scale.cuda())
        assert rel_err(c, _want(a, b)) < TOL
    assert calls == [9, 16]
    a, b = _operands(16, 1000, 2048)
    args = [t.cuda() for t in (a.data, a.scale, b.data, b.scale)]
    fp8_gemm(*args)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fp8_gemm(*args)
    a2, b2 = _operands(16, 1000, 2048, seed=11)
    for dst, src in zip(args, (a2.data, a2.scale, b2.data, b2.scale)):
        dst.copy_(src)
    graph.replay()
    torch.cuda.synchronize()
    assert rel_err(out, _want(a2, b2)) < TOL
