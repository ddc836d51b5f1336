"""The Gluon wgmma decode GEMV for fp4_gemm (``lowbit/ops/fp4_gemm/wgmma_gemv.py``), against an fp64
reference of the dequantized operands. GPU tier only: Gluon does not run under the interpreter
(``tests/sm90`` compiles it for sm_90 without a GPU)."""
from __future__ import annotations

import pytest
import torch

from lowbit.formats import FP8, MXFP4
from tests._helpers import poisoned, rel_err
from tests.ops.test_fp4_gemm import _spread_operands

TOL = 2.0**-8  # bf16 output rounding dominates (products exact, fp32 sums)


def _kernel_or_skip():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the wgmma GEMV is sm_90 only (Gluon, wgmma, TMA); the interpreter cannot run Gluon")
    from lowbit.ops.fp4_gemm import wgmma_gemv as g

    if g.GLUON_ERROR is not None:
        pytest.skip(f"triton.experimental.gluon is not available: {g.GLUON_ERROR}")
    return g


def _operands(m, n, k, seed=0, scale_fmt=None):
    gen = torch.Generator().manual_seed(seed)
    a = FP8.quantize(torch.randn(m, k, generator=gen), "group", 128, scale_fmt=scale_fmt)
    w = torch.randn(n, k, generator=gen) * 0.05
    w[:, :32] *= 300.0  # group scales far apart inside one 128 block
    return a, MXFP4.quantize(w)


def _run(g, a, b, config, e8m0=False, nan_ok=False):
    m, n = a.data.shape[0], b.packed.shape[0]
    out = poisoned((m, n), torch.bfloat16, "cuda")
    a_s = a.scale.to(torch.float8_e8m0fnu) if e8m0 else a.scale
    c = g.fp4_wgmma_gemv(a.data.cuda(), a_s.cuda(), b.packed.cuda(), b.scale.cuda(), config=config, out=out)
    assert c is out and (nan_ok or not torch.isnan(c).any())
    return c


# (m, n, k, (STAGES, SPLIT[, W[, X_FIRST]])): N not a multiple of the CTA's rows, every wgmma N
# width (8, 16, 32), a CTA's stages fewer than / more than the ring (TMA refills), splits with a
# short last split, 4 and 8 warps, both prologue orders, K = 1536 / 2048 / 7168 as in the benchmark
CASES = [(1, 64, 512, (2, 1)), (3, 100, 1536, (2, 1)), (8, 200, 2048, (4, 2)), (9, 64, 2560, (3, 3, 4, True)),
         (16, 136, 1536, (2, 2, 8)), (16, 520, 4096, (2, 1, 4, True)), (5, 2112, 7168, (2, 7)),
         (12, 200, 4096, (2, 1, 8, True)), (17, 136, 1536, (2, 1)), (32, 520, 2048, (2, 2, 4, True)),
         (24, 200, 4096, (2, 1, 8))]


@pytest.mark.cuda
@pytest.mark.parametrize("m,n,k,cfg", CASES)
def test_cuda_wgmma_gemv_vs_fp64(m, n, k, cfg):
    g = _kernel_or_skip()
    a, b = _operands(m, n, k)
    c = _run(g, a, b, cfg)
    assert rel_err(c, a.dequantize(torch.float64) @ b.dequantize(torch.float64).T) < TOL


@pytest.mark.cuda
def test_cuda_wgmma_gemv_fresh_inputs_and_counters():
    """Split launches leave their arrival counters at zero: many launches in a row on fresh
    random inputs each give the right answer."""
    g = _kernel_or_skip()
    for seed in range(6):
        a, b = _operands(16, 320, 2048, seed=seed)
        c = _run(g, a, b, (3, 4))
        assert rel_err(c, a.dequantize(torch.float64) @ b.dequantize(torch.float64).T) < TOL


@pytest.mark.cuda
@pytest.mark.parametrize("m,n,k,cfg", [(16, 200, 1536, (2, 1)), (4, 136, 2048, (4, 1, 8)), (16, 320, 4096, (2, 2)),
                                       (1, 2112, 7168, (2, 7))])
def test_cuda_wgmma_gemv_schedules_agree(m, n, k, cfg):
    """The activation loads issued before the weight TMAs stage the same bytes, and the early
    trigger changes only when the next kernel starts: bit-identical outputs, and right; the
    picked config too."""
    g = _kernel_or_skip()
    a, b = _operands(m, n, k, seed=3)
    args = [t.cuda() for t in (a.data, a.scale, b.packed, b.scale)]
    base = g.fp4_wgmma_gemv(*args, config=g.WgmmaGemvConfig(*cfg))
    for x_first in (False, True):
        for trigger in (False, True):
            assert torch.equal(base, g.fp4_wgmma_gemv(*args, config=g.WgmmaGemvConfig(*cfg)._replace(
                x_first=x_first, trigger=trigger)))
    assert rel_err(base, a.dequantize(torch.float64) @ b.dequantize(torch.float64).T) < TOL
    assert rel_err(g.fp4_wgmma_gemv(*args), a.dequantize(torch.float64) @ b.dequantize(torch.float64).T) < TOL


@pytest.mark.cuda
def test_cuda_wgmma_gemv_e8m0_and_scale_spread():
    """UE8M0 activation scales; group scales 0..12 binades apart inside every 128 block with the
    activations zero on the largest group (each wgmma covers one group and is scaled alone)."""
    g = _kernel_or_skip()
    a, b = _operands(7, 96, 1024, scale_fmt="ue8m0")
    c = _run(g, a, b, (4, 2), e8m0=True)
    assert rel_err(c, a.dequantize(torch.float64) @ b.dequantize(torch.float64).T) < TOL
    a, b = _spread_operands(4, 64, 512)
    c = _run(g, a, b, (2, 1))
    assert rel_err(c, a.dequantize(torch.float64) @ b.dequantize(torch.float64).T) < TOL


@pytest.mark.cuda
def test_cuda_wgmma_gemv_every_byte_value():
    """A weight holding every packed byte value (all 16 codes in both nibbles, -0 included)."""
    g = _kernel_or_skip()
    n, k = 64, 1024
    gen = torch.Generator().manual_seed(7)
    packed = (torch.randperm(n * k // 2, generator=gen) % 256).to(torch.uint8).reshape(n, k // 2)
    scale = torch.randint(120, 135, (n, k // 32), generator=gen).to(torch.uint8)
    b = MXFP4(packed, scale)
    a = FP8.quantize(torch.randn(11, k, generator=gen), "group", 128)
    c = _run(g, a, b, (2, 2))
    assert rel_err(c, a.dequantize(torch.float64) @ b.dequantize(torch.float64).T) < TOL


@pytest.mark.cuda
@pytest.mark.parametrize("split", [1, 2])
def test_cuda_wgmma_gemv_scale_bytes_0_and_255(split):
    """UE8M0 byte 0 is 2^-127 and byte 255 NaN: every output of a row holding a 255 is NaN (the
    reference's rule), the other rows are unaffected."""
    g = _kernel_or_skip()
    from lowbit.ops.fp4_gemm.reference import fp4_gemm_ref

    a, b = _operands(3, 70, 1024)
    scale = b.scale.clone()
    scale[5, 2] = 0
    scale[7, :] = 0
    scale[11, 6] = 255
    scale[66, 31] = 255
    b = MXFP4(b.packed, scale)
    c = _run(g, a, b, (2, split), nan_ok=True).cpu()
    ref = fp4_gemm_ref(a.data, a.scale, b.packed, b.scale)
    nan_rows = torch.zeros(70, dtype=torch.bool)
    nan_rows[[11, 66]] = True
    assert torch.equal(torch.isnan(c), nan_rows.expand(3, 70))
    assert torch.equal(torch.isnan(ref), nan_rows.expand(3, 70))
    keep = ~nan_rows
    assert rel_err(c[:, keep], a.dequantize(torch.float64) @ b.dequantize(torch.float64)[keep].T) < TOL


@pytest.mark.cuda
@pytest.mark.parametrize("cfg", [(4, 2), (2, 1)])
def test_cuda_wgmma_gemv_graph_replay(cfg):
    """Capture a split launch (and one refilling its ring) in a CUDA graph, copy new inputs into
    the captured buffers, replay."""
    g = _kernel_or_skip()
    a, b = _operands(16, 384, 2048)
    args = [t.cuda() for t in (a.data, a.scale, b.packed, b.scale)]
    out = torch.empty(16, 384, dtype=torch.bfloat16, device="cuda")
    g.fp4_wgmma_gemv(*args, config=cfg, out=out)  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        g.fp4_wgmma_gemv(*args, config=cfg, out=out)
    a2, b2 = _operands(16, 384, 2048, seed=3)
    for dst, src in zip(args, (a2.data, a2.scale, b2.packed, b2.scale)):
        dst.copy_(src)
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert rel_err(out, a2.dequantize(torch.float64) @ b2.dequantize(torch.float64).T) < TOL


@pytest.mark.cuda
@pytest.mark.parametrize("cfg", [(2, 1), (4, 2)])
@pytest.mark.parametrize("trigger", [False, True])
def test_cuda_wgmma_gemv_pdl_sees_the_previous_kernels_writes(cfg, trigger):
    """Programmatic dependent launches (every launch of this kernel) inside a CUDA graph: the
    weights and activations are written by the kernel just before each GEMV (an elementwise copy), two GEMVs follow each other
    (the second's split counters are reset by the first), and the inputs change between replays:
    every output is the product of the data written right before it."""
    g = _kernel_or_skip()
    m, n, k = 16, 384, 2048
    a, b = _operands(m, n, k)
    src = [t.cuda() for t in (a.data.view(torch.uint8), a.scale, b.packed, b.scale)]
    buf = [torch.empty_like(t) for t in src]
    outs = [torch.empty(m, n, dtype=torch.bfloat16, device="cuda") for _ in range(2)]

    def step():
        for d, s_ in zip(buf, src):
            torch.bitwise_xor(s_.view(torch.uint8), 0, out=d.view(torch.uint8))  # a kernel, not a memcpy
        for o in outs:
            g.fp4_wgmma_gemv(buf[0].view(torch.float8_e4m3fn), buf[1], buf[2], buf[3],
                             config=g.WgmmaGemvConfig(*cfg)._replace(trigger=trigger), out=o)

    step()  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for seed in (5, 6):
        a2, b2 = _operands(m, n, k, seed=seed)
        for d, s_ in zip(src, (a2.data.view(torch.uint8), a2.scale, b2.packed, b2.scale)):
            d.copy_(s_)
        for o in outs:
            o.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        want = a2.dequantize(torch.float64) @ b2.dequantize(torch.float64).T
        for o in outs:
            assert rel_err(o, want) < TOL


def test_wgmma_gemv_checks():
    """Shapes it does not serve are ValueErrors before any launch."""
    from lowbit.ops.fp4_gemm import wgmma_gemv as g

    if g.GLUON_ERROR is not None:
        pytest.skip(f"triton.experimental.gluon is not available: {g.GLUON_ERROR}")
    a, b = _operands(33, 64, 512)
    with pytest.raises(ValueError, match="M <= 32"):
        g.fp4_wgmma_gemv(a.data, a.scale, b.packed, b.scale)
    a1, b1 = _operands(1, 64, 384)
    with pytest.raises(ValueError, match="K % 512"):
        g.fp4_wgmma_gemv(a1.data, a1.scale, b1.packed, b1.scale)
    a2, b2 = _operands(1, 64, 512)
    with pytest.raises(ValueError, match="b_s"):
        g.fp4_wgmma_gemv(a2.data, a2.scale, b2.packed, b2.scale[:, :8].contiguous())
    with pytest.raises(ValueError, match="STAGES >= 1"):
        g.fp4_wgmma_gemv(a2.data, a2.scale, b2.packed, b2.scale, config=(0, 1))
    with pytest.raises(ValueError, match="W in"):
        g.fp4_wgmma_gemv(a2.data, a2.scale, b2.packed, b2.scale, config=(2, 1, 2))
    wide = torch.zeros(1, 1024, dtype=a2.data.dtype)
    with pytest.raises(ValueError, match="non-contiguous a$"):
        g.fp4_wgmma_gemv(wide[:, ::2], a2.scale, b2.packed, b2.scale)
    with pytest.raises(ValueError, match=r"out must be a contiguous bf16 \[1, 64\]"):
        g.fp4_wgmma_gemv(a2.data, a2.scale, b2.packed, b2.scale, out=torch.empty(1, 64))


@pytest.mark.cuda
def test_cuda_fp4_gemm_dispatches_decode_sizes_to_wgmma_gemv(monkeypatch):
    """fp4_gemm takes the wgmma GEMV at M <= 16 when K % 512 == 0, and at M = 17..64 over 32-row
    chunks (one launch at M = 17); not at M = 65 or K = 384 (the tiled kernel / mma.sync GEMV
    then); every route agrees with fp64, and with mma_gemv where both serve."""
    g = _kernel_or_skip()
    from lowbit.ops.fp4_gemm import fp4_gemm
    from lowbit.ops.fp8_gemm.mma_gemv import mma_gemv

    calls = []
    real = g.fp4_wgmma_gemv
    monkeypatch.setattr(g, "fp4_wgmma_gemv", lambda *x, **kw: calls.append(x[0].shape) or real(*x, **kw))
    for m, k in ((16, 2048), (1, 1024), (17, 2048), (65, 2048), (8, 384)):
        a, b = _operands(m, 96, k)
        c = fp4_gemm(a.data.cuda(), a.scale.cuda(), b.packed.cuda(), b.scale.cuda())
        assert rel_err(c, a.dequantize(torch.float64) @ b.dequantize(torch.float64).T) < TOL
    assert calls == [(16, 2048), (1, 1024), (17, 2048)]
    a, b = _operands(4, 96, 1024)
    args = [t.cuda() for t in (a.data, a.scale, b.packed, b.scale)]
    assert rel_err(mma_gemv(*args, fp4=True), a.dequantize(torch.float64) @ b.dequantize(torch.float64).T) < TOL


@pytest.mark.cuda
def test_cuda_fp4_gemm_wgmma_split_path_compile_and_graph():
    """The public op on a split configuration (N 2112, K 7168 at M = 5: 7 splits): torch.compile
    (fullgraph) gives the eager bits; a CUDA graph captured after one eager call (which makes the
    arrival counters) replays right on new inputs copied into its buffers."""
    _kernel_or_skip()
    from lowbit.ops.fp4_gemm import fp4_gemm

    a, b = _operands(5, 2112, 7168)
    args = [t.cuda() for t in (a.data, a.scale, b.packed, b.scale)]
    eager = fp4_gemm(*args)
    assert rel_err(eager, a.dequantize(torch.float64) @ b.dequantize(torch.float64).T) < TOL
    assert torch.equal(torch.compile(fp4_gemm, fullgraph=True)(*args), eager)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fp4_gemm(*args)
    a2, b2 = _operands(5, 2112, 7168, seed=4)
    for dst, src in zip(args, (a2.data, a2.scale, b2.packed, b2.scale)):
        dst.copy_(src)
    graph.replay()
    torch.cuda.synchronize()
    assert rel_err(out, a2.dequantize(torch.float64) @ b2.dequantize(torch.float64).T) < TOL
