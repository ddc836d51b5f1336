"""fp4_gemm against an fp64 reference of the dequantized operands, on every tier."""
from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from lowbit.formats import FP8, MXFP4
from lowbit.ops.fp4_gemm import fp4_gemm
from lowbit.ops.fp4_gemm.expand import fp4_weight_to_fp8
from lowbit.ops.fp4_gemm.tiled import shift_table_words
from tests._helpers import capture, poisoned, rel_err
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


def _spread_operands(m, n, k, seed=0, d_min=0):
    """Weights whose four 32-wide scales in each 128 block lie d = 0..12 binades below the block's
    largest (group 0, exponent byte 140), and activations that are ZERO on every group 0: the
    output then comes from the smaller groups alone, so losing them (d > 8) or mis-encoding their
    shifted E4M3 values (d = 6..8 are E4M3 subnormals) is a large relative error."""
    g = torch.Generator().manual_seed(seed)
    packed = torch.randint(0, 256, (n, k // 2), generator=g, dtype=torch.uint8)
    d = torch.randint(d_min, 13, (n, k // 32), generator=g)
    d[:, 0::4] = 0
    if d_min == 0:
        d[: min(n, 13), 1] = torch.arange(min(n, 13))  # every shift appears at least once
    scale = (140 - d).to(torch.uint8)
    x = torch.randn(m, k, generator=g)
    x.view(m, k // 32, 32)[:, 0::4] = 0.0
    return FP8.quantize(x, "group", 128), MXFP4(packed, scale)


@pytest.mark.parametrize("m,n", [(1, 64), (5, 96)])
def test_fp4_gemm_scale_spread(backend, m, n):
    """Exact for any spread of the per-32 scales inside a 128 block (the aligned kernel shifts each
    group to the block's largest exponent and adds groups more than 8 binades down separately)."""
    a, b = _spread_operands(m, n, 512)
    dev = backend.device
    with backend.active():
        c = fp4_gemm(a.data.to(dev), a.scale.to(dev), b.packed.to(dev), b.scale.to(dev))
    assert rel_err(c, _fp64_ref(a, b)) < TOL


def test_fp4_gemm_scale_spread_needs_far_groups(backend):
    """Operands whose every nonzero product comes from a group more than 8 binades below its
    block's largest scale: the aligned step is right only through its far-group pass (a result
    without those groups is far off), and so is the four-dot step."""
    if not backend.is_triton:
        pytest.skip("the step is a Triton launch parameter")
    from lowbit.ops.fp4_gemm import tiled

    a, b = _spread_operands(3, 64, 512, d_min=9)  # every nonzero product is from a far group
    dev = backend.device
    args = (a.data.to(dev), a.scale.to(dev), b.packed.to(dev), b.scale.to(dev))
    with backend.active():
        c_far = tiled.fp4_gemm_tiled(*args, aligned=True)
        c_old = tiled.fp4_gemm_tiled(*args, aligned=False)
    ref = _fp64_ref(a, b)
    assert rel_err(c_far, ref) < TOL and rel_err(c_old, ref) < TOL
    near = b.scale.int() >= 140 - 8  # groups within 8 binades of their block's largest
    w_near = b.dequantize(torch.float64) * near.repeat_interleave(32, 1)
    assert rel_err(a.dequantize(torch.float64) @ w_near.T, ref) > 0.5


@pytest.mark.parametrize("cfg", [(16, 64, 4, 4, False), (64, 64, 4, 4, False), (16, 64, 4, 4, True)],
                         ids=["noswap16", "noswap64", "swap16"])
def test_fp4_gemm_aligned_orientations(backend, cfg):
    """The aligned step in both tile orientations (weight as the register A operand under swap-AB,
    or as the shared-memory B operand), with scale spreads that need the far-group pass."""
    if not backend.is_triton:
        pytest.skip("the launch configuration is a Triton parameter")
    from lowbit.ops.fp4_gemm import tiled

    a, b = _spread_operands(5, 96, 512, seed=3)
    dev = backend.device
    args = (a.data.to(dev), a.scale.to(dev), b.packed.to(dev), b.scale.to(dev))
    with backend.active():
        c = tiled.fp4_gemm_tiled(*args, config=cfg)
    assert rel_err(c, _fp64_ref(a, b)) < TOL
    with pytest.raises(ValueError, match="swap-AB"):
        tiled.fp4_gemm_tiled(*args, config=(16, 64, 4, 4, False), aligned=False)


@triton.jit
def _table_words_kernel(out_ptr):
    d = tl.arange(0, 16)
    lo, hi = shift_table_words(tl.minimum(d, 9))
    tl.store(out_ptr + 2 * d, lo)
    tl.store(out_ptr + 2 * d + 1, hi)


def test_shift_table_words_match_the_tables(backend):
    """The in-register table words of the aligned kernel equal shift_tables() row for row."""
    if not backend.is_triton:
        pytest.skip("a Triton helper")
    from lowbit.ops.fp4_gemm.tiled import shift_tables

    out = torch.full((16, 2), -1, dtype=torch.int32, device=backend.device)
    with backend.active():
        _table_words_kernel[(1,)](out)
    assert torch.equal(out[:10].cpu(), shift_tables())
    assert torch.equal(out[10:].cpu(), torch.zeros(6, 2, dtype=torch.int32))


def test_shift_tables_are_exact():
    """Row d of the upcast tables is E2M1 * 2^-d in E4M3, decoded back exactly; row 9 is zero."""
    from lowbit.ops.fp4_gemm.tiled import shift_tables

    t = shift_tables().to(torch.int64) & 0xFFFFFFFF
    mags = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=torch.float64)
    for d in range(10):
        raw = [(int(t[d, i // 4]) >> (8 * (i % 4))) & 0xFF for i in range(8)]
        vals = torch.tensor(raw, dtype=torch.uint8).view(torch.float8_e4m3fn).double()
        assert torch.equal(vals, mags * 2.0**-d if d < 9 else torch.zeros(8, dtype=torch.float64))


def test_fp4_gemm_split_k(backend):
    if not backend.is_triton:
        pytest.skip("split-K is a Triton launch parameter; the reference has none")
    from lowbit.ops.fp4_gemm import tiled

    a, b = _operands(2, 64, 384)
    dev = backend.device
    with backend.active():
        c = tiled.fp4_gemm_tiled(a.data.to(dev), a.scale.to(dev), b.packed.to(dev), b.scale.to(dev), split_k=2)
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
@pytest.mark.parametrize("m,e8m0", [(17, False), (32, True), (25, False), (64, False), (40, True)])
def test_cuda_wgmma_gemv_row_chunks(monkeypatch, m, e8m0):
    """M = 17..64 on sm_90: the wgmma GEMV once per 32 rows (the wgmma's N = 32), every output row
    written (NaN-poisoned chunks), right against fp64 and equal row for row to the GEMV run on each
    chunk alone; the tiled kernel agrees; captured in a CUDA graph it replays with new activations."""
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the Gluon wgmma GEMV runs on sm_90 only")
    from lowbit.ops.fp4_gemm import dispatch, tiled
    from lowbit.ops.fp4_gemm import wgmma_gemv as gw

    step = gw.MAX_M
    n, k = 520, 1536
    fmt = "ue8m0" if e8m0 else None  # power-of-two activation scales, passed as e8m0
    _, b = _operands(1, n, k)
    a = FP8.quantize(torch.randn(m, k), "group", 128, scale_fmt=fmt)
    a_s = a.scale.to(torch.float8_e8m0fnu) if e8m0 else a.scale
    args = [t.cuda() for t in (a.data, a_s, b.packed, b.scale)]
    assert dispatch.route(dispatch.problem(*args))[0].kernel == "wgmma_gemv_chunks"
    launches = []
    real = gw.fp4_wgmma_gemv

    def poisoned_launch(x, xs, w, ws, config=None, out=None):
        launches.append(x.shape[0])
        out.fill_(float("nan"))
        return real(x, xs, w, ws, config, out=out)

    monkeypatch.setattr(gw, "fp4_wgmma_gemv", poisoned_launch)
    c = fp4_gemm(*args)
    assert launches == [min(step, m - r0) for r0 in range(0, m, step)]
    assert not torch.isnan(c).any() and rel_err(c, _fp64_ref(a, b)) < TOL
    for r0 in range(0, m, step):
        assert torch.equal(c[r0:r0 + step], real(args[0][r0:r0 + step], args[1][r0:r0 + step], args[2], args[3]))
    assert rel_err(tiled.fp4_gemm_tiled(*args), _fp64_ref(a, b)) < TOL
    static = [t.clone() for t in args]
    fp4_gemm(*static)
    graph, out = capture(lambda: fp4_gemm(*static))
    a2 = FP8.quantize(torch.randn(m, k), "group", 128, scale_fmt=fmt)
    static[0].copy_(a2.data.cuda())
    static[1].copy_((a2.scale.to(torch.float8_e8m0fnu) if e8m0 else a2.scale).cuda())
    graph.replay()
    assert rel_err(out, _fp64_ref(a2, b)) < TOL


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


@pytest.mark.parametrize("aligned", [False, True])
def test_fp4_gemm_steps_over_split_k(backend, aligned):
    """Both steps over split-K ranges that end before the last block (the next block's scales are
    loaded one iteration ahead, clamped at the end), on operands with far groups."""
    if not backend.is_triton:
        pytest.skip("a Triton launch parameter")
    from lowbit.ops.fp4_gemm import tiled
    from lowbit.ops.fp8_gemm.tiled import GemmConfig

    a, b = _spread_operands(3, 64, 512, seed=5)
    dev = backend.device
    args = (a.data.to(dev), a.scale.to(dev), b.packed.to(dev), b.scale.to(dev))
    with backend.active():
        c = tiled.fp4_gemm_tiled(*args, config=GemmConfig(16, 64, 4, 4, True), aligned=aligned, split_k=2)
    assert rel_err(c, _fp64_ref(a, b)) < TOL


def _expand_operands(n, k, seed=0):
    """Packed E2M1 with every code, UE8M0 scales that put groups 0..14 binades below their 128 x 128
    block's largest byte (the exact range), one block whose bytes are all below 7 (its fp32 block
    scale 2^(E - 133) is subnormal) and rows past the last full row block."""
    g = torch.Generator().manual_seed(seed)
    packed = torch.randint(0, 256, (n, k // 2), generator=g, dtype=torch.uint8)
    scale = (140 - torch.randint(0, 15, (n, k // 32), generator=g)).to(torch.uint8)
    scale[:, 0] = 140
    scale[: min(n, 128), 4:8] = torch.randint(0, 7, (min(n, 128), 4), generator=g).to(torch.uint8)
    return packed, scale


@pytest.mark.parametrize("n,k", [(128, 256), (200, 512)])
def test_fp4_weight_to_fp8_bit_exact(backend, n, k):
    """The FP8 re-encoding of an FP4 weight: the same bits as the reference, its dequantized values
    exactly the FP4 weight's, and no flag while every group is within 14 binades of its block."""
    if not backend.is_triton:
        pytest.skip("the re-encoding is a Triton kernel (its reference is the definition tested here)")
    from lowbit.ops.fp4_gemm.expand import fp4_weight_to_fp8
    from lowbit.ops.fp4_gemm.reference import fp4_weight_dequant_ref, fp4_weight_to_fp8_ref

    packed, scale = _expand_operands(n, k)
    q, qs, bad = fp4_weight_to_fp8(packed.to(backend.device), scale.to(backend.device))
    rq, rqs, rbad = fp4_weight_to_fp8_ref(packed, scale)
    assert not rbad and int(bad.item()) == 0
    assert torch.equal(q.cpu().view(torch.uint8), rq.view(torch.uint8)) and torch.equal(qs.cpu(), rqs)
    full = rq.double() * rqs.double().repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)
    assert torch.equal(full, fp4_weight_dequant_ref(packed, scale).double())


@pytest.mark.parametrize("case", ["far", "nan"])
def test_fp4_weight_to_fp8_flags(backend, case):
    """A nonzero group 15 binades below its block's largest scale, or a 255 (NaN) scale byte, sets
    the flag (the re-encoding is then not the weight); a far group of zeros does not."""
    if not backend.is_triton:
        pytest.skip("the re-encoding is a Triton kernel")
    from lowbit.ops.fp4_gemm.expand import fp4_weight_to_fp8
    from lowbit.ops.fp4_gemm.reference import fp4_weight_to_fp8_ref

    packed, scale = _expand_operands(130, 256)
    packed[129, :16] = 0
    scale[129, 0] = 140 - 20  # far, but all zeros: harmless
    q, _, bad = fp4_weight_to_fp8(packed.to(backend.device), scale.to(backend.device))
    assert int(bad.item()) == 0 and not fp4_weight_to_fp8_ref(packed, scale)[2]
    if case == "far":
        packed[7, 20] = 0x11
        scale[7, 1] = 140 - 15
    else:
        scale[129, 5] = 255
    _, _, bad = fp4_weight_to_fp8(packed.to(backend.device), scale.to(backend.device))
    assert int(bad.item()) == 1 and fp4_weight_to_fp8_ref(packed, scale)[2]


@pytest.mark.parametrize("spread", [False, True])
def test_fp4_gemm_via_fp8(backend, spread):
    """The re-encode path (``dispatch.fp4_via_fp8``): the weight re-encoded as FP8 and the FP8 GEMM;
    a weight whose re-encoding is not exact (groups 9-12 binades down are fine, the spread
    operands' d up to 12; a far group of 20 is not) gets the tiled kernel's result from the
    guarded launch that follows, decided on the device. Both agree with fp64; the guarded launch
    writes nothing for an exact weight (its output poisoned with NaN stays NaN)."""
    if not backend.is_triton:
        pytest.skip("a Triton path")
    from lowbit.ops.fp4_gemm import dispatch, tiled

    a, b = _spread_operands(130, 96, 256)
    if spread:
        b.scale[3, 5] = 140 - 20  # a far nonzero group: the guarded tiled launch serves this weight
    dev = backend.device
    args = [t.to(dev) for t in (a.data, a.scale, b.packed, b.scale)]
    with backend.active():
        c = dispatch.fp4_via_fp8(*args)
        # the guarded launch alone, on a poisoned output: it writes every element or none
        _, _, bad = fp4_weight_to_fp8(args[2], args[3])
        out = poisoned((130, 96), torch.bfloat16, dev)
        tiled.fp4_gemm_tiled(*args, split_k=1, out=out, guard=bad)
    assert rel_err(c, _fp64_ref(a, b)) < TOL
    assert not torch.isnan(c).any()
    if spread:
        assert int(bad.item()) == 1 and rel_err(out, _fp64_ref(a, b)) < TOL
    else:
        assert int(bad.item()) == 0 and torch.isnan(out.float()).all()


@pytest.mark.cuda
@pytest.mark.parametrize("m,n,k", [(256, 2112, 7168), (1024, 300, 1024)])
@pytest.mark.parametrize("spread", [False, True])
def test_cuda_fp4_gemm_via_fp8_and_in_a_graph(m, n, k, spread):
    """The re-encode + FP8 GEMM path on the GPU against fp64 and the tiled kernel, for an exact
    weight and for one the guarded tiled launch has to serve (a far group); it needs no host read,
    so CUDA-graph capture takes it too, and replays with new activations are right."""
    from lowbit.ops.fp4_gemm import dispatch, tiled

    a, b = _operands(m, n, k)
    if spread:
        b.scale[3, 1] = max(int(b.scale[3].max()) - 20, 1)  # 20 binades below: not exact in E4M3
    args = [t.cuda() for t in (a.data, a.scale, b.packed, b.scale)]
    _, _, bad = fp4_weight_to_fp8(args[2], args[3])
    assert int(bad.item()) == int(spread)
    c = dispatch.fp4_via_fp8(*args)
    ref = _fp64_ref(a, b)
    assert rel_err(c, ref) < TOL
    assert rel_err(tiled.fp4_gemm_tiled(*args), ref) < TOL
    graph, g = capture(lambda: dispatch.fp4_via_fp8(*args))
    new = FP8.quantize(torch.randn(m, k), "group", 128)
    args[0].copy_(new.data.cuda())
    args[1].copy_(new.scale.cuda())
    graph.replay()
    torch.cuda.synchronize()
    assert rel_err(g, new.dequantize(torch.float64) @ b.dequantize(torch.float64).T) < TOL


def test_fp4_weight_to_fp8_every_code(backend):
    """The re-encoding with every code in both nibbles and every shift up to 12 binades, partial
    row blocks and negative zeros: the reference's bits."""
    if not backend.is_triton:
        pytest.skip("the re-encoding is a Triton kernel")
    from lowbit.ops.fp4_gemm import expand
    from lowbit.ops.fp4_gemm.reference import fp4_weight_to_fp8_ref

    g = torch.Generator().manual_seed(3)
    n, k, spread = 150, 256, 12
    packed = torch.randint(0, 256, (n, k // 2), generator=g, dtype=torch.uint8)
    packed[0, :8] = torch.arange(0, 256, 34, dtype=torch.uint8)[:8]  # nibbles 0..15 both halves
    packed[1, :8] = torch.tensor([0x80, 0x08, 0x88, 0x18, 0x81, 0x91, 0x19, 0xF7], dtype=torch.uint8)
    scale = (130 - torch.randint(0, spread + 1, (n, k // 32), generator=g)).to(torch.uint8)
    scale[:, 0] = 130
    scale[2, 1] = 130 - spread
    rq, rqs, rbad = fp4_weight_to_fp8_ref(packed, scale)
    assert not rbad
    dev = backend.device
    q, qs, bad = expand.fp4_weight_to_fp8(packed.to(dev), scale.to(dev))
    assert torch.equal(q.cpu().view(torch.uint8), rq.view(torch.uint8))
    assert torch.equal(qs.cpu(), rqs) and int(bad.item()) == 0
    assert (rq.view(torch.uint8) == 0x80).any()  # negative zeros kept


def _route(m, n, k, arch=(9, 0), aligned=True, **kw):
    from lowbit.ops.fp4_gemm import dispatch

    return dispatch.route(dispatch.Problem(m, n, k, arch, 132, aligned, **kw))[0].kernel


def test_dispatch_routes():
    """Which kernel serves which M (H200: 132 SMs, aligned operands): the table's bands."""
    assert [_route(m, 7168, 2048) for m in (1, 16, 17, 64, 65, 4096)] == [
        "wgmma_gemv", "wgmma_gemv", "wgmma_gemv_chunks", "wgmma_gemv_chunks", "tiled", "expand_fp8"]
    # K % 512 != 0, no Gluon, a capture without counters: mma_gemv at M <= 16, the tiled kernel above
    assert [_route(m, 7168, 384) for m in (1, 16, 17)] == ["mma_gemv", "mma_gemv", "tiled"]
    assert _route(16, 7168, 2048, gluon=False) == "mma_gemv" and _route(16, 7168, 2048, counters=False) == "mma_gemv"
    assert [_route(m, 7168, 2048, arch=(8, 9)) for m in (1, 16, 17, 4096)] == ["mma_gemv", "mma_gemv", "tiled",
                                                                              "expand_fp8"]
    assert [_route(m, 7168, 2048, arch=None) for m in (0, 1, 16, 64)] == ["tiled"] * 4
    assert _route(1, 7168, 2048, aligned=False) == "tiled"


def test_expand_rule():
    """The re-encode path's size rule (measured, see ``EXPAND_MIN_M``): M >= 512 and M N K >= 2^35 in
    eager calls, >= 2^33 inside CUDA-graph capture; the interpreter follows the eager rule; not
    before sm_89."""
    def ok(m, n, k, **kw):
        return _route(m, n, k, **kw) == "expand_fp8"

    assert ok(4096, 7168, 2048) and ok(1024, 24576, 1536) and ok(512, 7168, 16384)
    assert not ok(1024, 4096, 7168) and not ok(1024, 7168, 2048) and not ok(512, 24576, 1536)  # under 2^35
    assert not ok(256, 7168, 16384)  # below EXPAND_MIN_M whatever the size
    assert not ok(512, 4096, 7168) and ok(512, 4096, 7168, capturing=True) and not ok(512, 2112, 7168, capturing=True)
    assert ok(4096, 7168, 2048, arch=None) and not ok(4096, 7168, 2048, arch=(8, 0))


@pytest.mark.cuda
def test_cuda_problem_reads_the_capture_state(monkeypatch):
    """The call's problem knows whether it is being captured (faked here: the rule only asks the
    stream), so the re-encode path's capture bar applies."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU: this tier runs on the H200 (pytest -m cuda)")
    from lowbit.ops.fp4_gemm import dispatch

    a = torch.empty(512, 7168, dtype=torch.float8_e4m3fn, device="cuda")
    args = (a, torch.empty(512, 56, device="cuda"), torch.empty(4096, 3584, dtype=torch.uint8, device="cuda"),
            torch.empty(4096, 224, dtype=torch.uint8, device="cuda"))
    assert not dispatch.problem(*args).capturing
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    p = dispatch.problem(*args)
    assert p.capturing and dispatch.route(p)[0].kernel == "expand_fp8"


def test_dispatch_table_rows():
    from lowbit.ops.fp4_gemm import dispatch

    rows = dispatch.dispatch_table()
    assert [r["kernel"] for r in rows] == [r.kernel for r in dispatch.RULES]
    assert rows[2]["m"] == "512+" and rows[-1]["m"] == "any"


# ---- empty shapes (issue #49 item 4): M = 0 / N = 0 give an empty result with no launch ---------

@pytest.mark.parametrize("lead, n", [((0,), 64), ((4,), 0), ((0,), 0), ((2, 0), 256), ((3, 2), 0)])
def test_empty_m_or_n(backend, poison_empty, lead, n):
    """Empty MoE experts: the Triton path raised ZeroDivisionError (split-K picked first)."""
    dev = backend.device
    a = torch.zeros(*lead, 256, device=dev).to(torch.float8_e4m3fn)
    a_s = torch.ones(*lead, 2, device=dev)
    b = torch.zeros(n, 128, dtype=torch.uint8, device=dev)
    b_s = torch.full((n, 8), 127, dtype=torch.uint8, device=dev)
    with backend.active():
        c = fp4_gemm(a, a_s, b, b_s)
    assert c.shape == (*lead, n) and c.dtype == torch.bfloat16 and c.numel() == 0


def test_zero_k_refused(backend):
    dev = backend.device
    a = torch.zeros(4, 0, device=dev).to(torch.float8_e4m3fn)
    b = torch.zeros(64, 0, dtype=torch.uint8, device=dev)
    with backend.active(), pytest.raises(ValueError, match=r"K = a.shape\[-1\] = 0 must be a positive multiple of 128"):
        fp4_gemm(a, torch.ones(4, 0, device=dev), b, torch.zeros(64, 0, dtype=torch.uint8, device=dev))
