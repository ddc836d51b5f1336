"""The stream-K FP8 decode GEMV (``lowbit/ops/fp8_gemm/gluon_streamk_gemv.py``), against an fp64
reference of the dequantized operands. The plan (how many units a CTA has, how many CTAs share a
tile: compile-time sizes of the kernel) is checked on the CPU against a brute-force count; the
kernel itself only on the GPU tier: Gluon does not run under the interpreter
(``scripts/fp8_streamk_gemv_offline.py`` compiles it for sm_90 without a GPU)."""
from __future__ import annotations

import pytest
import torch

from lowbit.formats import FP8
from tests._helpers import poisoned

TOL = 2.0**-8  # against fp64, norm-wise: bf16 output rounding dominates


def _kernel_or_skip():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the stream-K FP8 GEMV is sm_90 only (Gluon, wgmma, TMA); the interpreter cannot run Gluon")
    from lowbit.ops.fp8_gemm import gluon_streamk_gemv as g

    if g._GLUON_IMPORT_ERROR is not None:
        pytest.skip(f"triton.experimental.gluon is not available: {g._GLUON_IMPORT_ERROR}")
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


def _check(c, a, b):
    """Against fp64 norm-wise (as the other GEMV tests), and element-wise against the split-free
    wgmma GEMV (``gluon_wgmma_gemv``, SPLIT = 1): the same wgmma per 128-wide block -- Hopper's FP8
    tensor cores keep only ~14 bits inside one, so fp64 is no element-wise reference -- summed in
    another fp32 order. The bound, one bf16 ulp plus 2^-16 of the element's sum of |products|, is
    far below any one block's share, so a missing or doubled piece of any tile fails. Raises with
    the worst element on failure."""
    from lowbit.ops.fp8_gemm.gluon_wgmma_gemv import fp8_wgmma_gemv

    from tests._helpers import rel_err

    assert not torch.isnan(c).any()
    assert rel_err(c, _want(a, b)) < TOL
    ref = fp8_wgmma_gemv(*(t.cuda() for t in (a.data, a.scale, b.data, b.scale)), config=(2, 1, 4)).double().cpu()
    mags = a.dequantize(torch.float64).abs() @ b.dequantize(torch.float64).abs().T
    c64 = c.double().cpu()
    err = (c64 - ref).abs()
    bound = 2.0**-7 * ref.abs() + 2.0**-16 * mags
    bad = err > bound
    if bad.any():
        i = int(torch.argmax(err / bound))
        m, n = divmod(i, ref.shape[1])
        raise AssertionError(f"{int(bad.sum())} of {ref.numel()} elements off, worst at [{m}, {n}]: "
                             f"{c64[m, n].item()} vs {ref[m, n].item()} (bound {bound[m, n].item():.3g})")
    return True


def _run(g, a, b, config=None, grid=None, **kw):
    m, n = a.data.shape[0], b.data.shape[0]
    out = poisoned((m, n), torch.bfloat16, "cuda")
    c = g.fp8_streamk_gemv(a.data.cuda(), a.scale.cuda(), b.data.cuda(), b.scale.cuda(), config=config, out=out,
                           grid=grid, **kw)
    assert c is out
    return c


def _brute_plan(n, k, w, grid):
    kb, rows = k // 128, 16 * w
    tiles = -(-n // rows)
    units = tiles * kb
    g = min(grid, units)
    owner = [max(c for c in range(g) if c * units // g <= u) for u in range(units)]
    per = max(owner.count(c) for c in range(g))
    maxc = max(len({owner[u] for u in range(t * kb, t * kb + kb)}) for t in range(tiles))
    return dict(tiles=tiles, units=units, grid=g, per=per, maxc=maxc)


@pytest.mark.parametrize("n,k,w,grid", [(64, 128, 4, 132), (64, 1280, 4, 7), (300, 1024, 4, 11), (520, 4096, 8, 5),
                                        (2112, 7168, 4, 264), (24576, 1536, 4, 264), (7168, 16384, 4, 132),
                                        (4096, 7168, 8, 132), (100, 640, 4, 1)])
def test_streamk_plan_matches_brute_force(n, k, w, grid):
    from lowbit.ops.fp8_gemm.gluon_streamk_gemv import streamk_plan

    assert streamk_plan(n, k, w, grid) == _brute_plan(n, k, w, grid)


# (m, n, k, (CTAs an SM, STAGES, W), grid): every NB band (8, 16, 32, 64) and odd M inside them;
# N not a multiple of the unit's rows nor of the 128-row scale block; one tile shared by 7 CTAs;
# CTAs whose last tile is a shared head piece (streamed first) and whose range lies inside one
# tile; rings longer than a CTA's units and shorter (TMA refills); one CTA for everything
CASES = [(1, 64, 1280, (1, 2, 4), 7), (3, 300, 1024, (1, 3, 4), 11), (5, 130, 640, (1, 4, 4), 3),
         (8, 200, 2048, (1, 2, 4), 13), (9, 520, 4096, (1, 4, 8), 5), (16, 136, 1536, (1, 3, 8), 4),
         (17, 1000, 2048, (1, 6, 4), 40), (33, 2112, 7168, (2, 4, 4), None), (64, 200, 2048, (1, 8, 4), 9),
         (64, 1000, 16384, (1, 8, 4), 17), (50, 7168, 1536, (1, 4, 8), None), (2, 100, 640, (1, 3, 4), 1)]


@pytest.mark.cuda
@pytest.mark.parametrize("m,n,k,cfg,grid", CASES)
def test_cuda_fp8_streamk_gemv_vs_fp64(m, n, k, cfg, grid):
    """Both reductions of shared tiles (the last to arrive / the tile's first CTA polling) give
    the same bits."""
    g = _kernel_or_skip()
    a, b = _operands(m, n, k)
    c = _run(g, a, b, cfg, grid, mode=0)
    assert _check(c, a, b)
    assert torch.equal(c, _run(g, a, b, cfg, grid, mode=1))


@pytest.mark.cuda
@pytest.mark.parametrize("m,n,k", [(1, 2112, 7168), (16, 7168, 2048), (64, 4096, 7168), (40, 24576, 1536)])
def test_cuda_fp8_streamk_gemv_default_config(m, n, k):
    g = _kernel_or_skip()
    a, b = _operands(m, n, k, seed=1)
    assert _check(_run(g, a, b), a, b)


@pytest.mark.cuda
def test_cuda_fp8_streamk_gemv_deterministic_pdl_and_counters():
    """Launches leave the arrival counters at zero (many in a row on fresh inputs are all right);
    the sum order is fixed (repeats are bit-identical) and a plain launch equals the PDL one."""
    g = _kernel_or_skip()
    for seed in range(5):
        a, b = _operands(24, 320, 2048, seed=seed)
        c = _run(g, a, b, (1, 3, 4), 9)
        assert _check(c, a, b)
        assert torch.equal(c, _run(g, a, b, (1, 3, 4), 9))
        assert torch.equal(c, _run(g, a, b, (1, 3, 4), 9, pdl=False))


@pytest.mark.cuda
def test_cuda_fp8_streamk_gemv_e8m0_scales():
    g = _kernel_or_skip()
    a, b = _operands(21, 260, 1024, scale_fmt="ue8m0")
    a8, b8 = a.scale.to(torch.float8_e8m0fnu), b.scale.to(torch.float8_e8m0fnu)
    out = poisoned((21, 260), torch.bfloat16, "cuda")
    c = g.fp8_streamk_gemv(a.data.cuda(), a8.cuda(), b.data.cuda(), b8.cuda(), config=(1, 3, 4), out=out, grid=6)
    assert _check(c, a, b)


@pytest.mark.cuda
def test_cuda_fp8_streamk_gemv_nan_scale_poisons_its_block():
    """A NaN weight block scale makes exactly the outputs of its 128 rows NaN (as the reference),
    also where those rows' tiles are shared between CTAs."""
    g = _kernel_or_skip()
    from lowbit.ops.fp8_gemm.reference import fp8_gemm_ref

    a, b = _operands(5, 300, 1024)
    scale = b.scale.clone()
    scale[1, 3] = float("nan")
    ref = fp8_gemm_ref(a.data, a.scale, b.data, scale)
    for mode in (0, 1):
        c = g.fp8_streamk_gemv(a.data.cuda(), a.scale.cuda(), b.data.cuda(), scale.cuda(), config=(1, 2, 4), grid=7,
                               mode=mode).cpu()
        assert torch.equal(torch.isnan(c), torch.isnan(ref))
        assert torch.isnan(c[:, 128:256]).all() and not torch.isnan(c[:, :128]).any()


@pytest.mark.cuda
def test_cuda_fp8_streamk_gemv_mode_1_needs_a_resident_grid():
    """The polling reduction refuses a grid the GPU cannot hold at once (it could deadlock)."""
    g = _kernel_or_skip()
    a, b = _operands(64, 4096, 16384)
    args = [t.cuda() for t in (a.data, a.scale, b.data, b.scale)]
    with pytest.raises(ValueError, match="resident"):
        g.fp8_streamk_gemv(*args, config=(1, 8, 4), grid=4 * torch.cuda.get_device_properties(0).multi_processor_count,
                           mode=1)


@pytest.mark.cuda
def test_cuda_fp8_streamk_gemv_graph_replay():
    """Capture a launch with shared tiles in a CUDA graph, copy new inputs into the captured
    buffers, replay."""
    g = _kernel_or_skip()
    a, b = _operands(32, 384, 2048)
    args = [t.cuda() for t in (a.data, a.scale, b.data, b.scale)]
    out = torch.empty(32, 384, dtype=torch.bfloat16, device="cuda")
    g.fp8_streamk_gemv(*args, config=(1, 4, 4), out=out, grid=10)  # compile, make the counters outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        g.fp8_streamk_gemv(*args, config=(1, 4, 4), out=out, grid=10)
    a2, b2 = _operands(32, 384, 2048, seed=3)
    for dst, src in zip(args, (a2.data, a2.scale, b2.data, b2.scale)):
        dst.copy_(src)
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert _check(out, a2, b2)


def test_fp8_streamk_gemv_checks():
    """Shapes and configs it does not serve are ValueErrors before any launch; the eligibility
    test says no to CPU tensors."""
    from lowbit.ops.fp8_gemm import gluon_streamk_gemv as g

    if g._GLUON_IMPORT_ERROR is not None:
        pytest.skip(f"triton.experimental.gluon is not available: {g._GLUON_IMPORT_ERROR}")
    a, b = _operands(65, 64, 256)
    with pytest.raises(ValueError, match="M <= 64"):
        g.fp8_streamk_gemv(a.data, a.scale, b.data, b.scale)
    a, b = _operands(4, 64, 256)
    with pytest.raises(ValueError, match="b_s"):
        g.fp8_streamk_gemv(a.data, a.scale, b.data, b.scale[:, :1].contiguous())
    with pytest.raises(ValueError, match="W in"):
        g.fp8_streamk_gemv(a.data, a.scale, b.data, b.scale, config=(1, 2, 2))
    with pytest.raises(ValueError, match="mode must be 0, 1 or 2"):
        g.fp8_streamk_gemv(a.data, a.scale, b.data, b.scale, mode=3)
    with pytest.raises(ValueError, match="positive"):
        g.fp8_streamk_gemv(a.data, a.scale, b.data, b.scale, config=(0, 2, 4))
    wide = torch.zeros(4, 512, dtype=a.data.dtype)
    with pytest.raises(ValueError, match="non-contiguous a$"):
        g.fp8_streamk_gemv(wide[:, ::2], a.scale, b.data, b.scale)
    with pytest.raises(ValueError, match=r"out must be a contiguous bf16 \[4, 64\]"):
        g.fp8_streamk_gemv(a.data, a.scale, b.data, b.scale, out=torch.empty(4, 64))
    a, b = _operands(64, 64, 128 * 512)
    with pytest.raises(ValueError, match="shared memory"):
        g.fp8_streamk_gemv(a.data, a.scale, b.data, b.scale, config=(1, 8, 4), grid=1)
    assert not g.fp8_streamk_gemv_ok(a.data, b.data)  # CPU tensors
