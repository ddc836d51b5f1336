"""act_quant / fp4_act_quant / weight_dequant: bit-exact with the reference on every tier."""
from __future__ import annotations

import pytest
import torch

import lowbit
from lowbit.formats import FP8, e2m1_unpack, ue8m0_decode
from lowbit.ops.act_quant import act_quant, fp4_act_quant, weight_dequant
from lowbit.ops.act_quant.reference import act_quant_ref, fp4_act_quant_ref, weight_dequant_ref


def _bits(t):
    return t.view(torch.uint8) if t.element_size() == 1 else t.view(torch.int32) if t.dtype == torch.float32 else t.view(torch.int16)


def _special_input(shape, dtype, block):
    """Random values plus, per row: an all-zero block, exact powers of two, values past 448, tiny values."""
    x = torch.randn(shape) * 3
    x[..., :block] = 0.0
    if shape[-1] >= 2 * block:
        x[..., block:2 * block] = 2.0 ** torch.randint(-10, 10, x[..., block:2 * block].shape).float()
    x.view(-1, shape[-1])[0, -3:] = torch.tensor([1000.0, -5000.0, 1e-7])
    return x.to(dtype)


@pytest.mark.parametrize("shape", [(3, 256), (2, 3, 128)])
@pytest.mark.parametrize("scale_fmt", [None, "ue8m0"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_act_quant_bit_exact(backend, shape, scale_fmt, dtype):
    x = _special_input(shape, dtype, 128).to(backend.device)
    with backend.active():
        y, s = act_quant(x, 128, scale_fmt)
    q = FP8.quantize(x.cpu(), "group", 128, scale_fmt)
    assert y.dtype == torch.float8_e4m3fn and s.dtype == torch.float32
    assert y.shape == x.shape and s.shape == (*shape[:-1], shape[-1] // 128)
    assert torch.equal(_bits(y.cpu()), _bits(q.data))
    assert torch.equal(_bits(s.cpu()), _bits(q.scale))


@pytest.mark.parametrize("block_size", [64, 128])
def test_act_quant_e8m0_scale_dtype(backend, block_size):
    x = torch.randn(5, 256, dtype=torch.bfloat16).to(backend.device) * 10
    with backend.active():
        y, s = act_quant(x, block_size, "ue8m0", torch.float8_e8m0fnu)
    q = FP8.quantize(x.cpu(), "group", block_size, "ue8m0")
    assert s.dtype == torch.float8_e8m0fnu
    assert torch.equal(ue8m0_decode(s.cpu()), q.scale)
    assert torch.equal(_bits(y.cpu()), _bits(q.data))


def test_act_quant_nan_policy(backend):
    """A NaN poisons its own group only: NaN scale, NaN values; the other group is exact."""
    x = torch.randn(2, 256)
    x[0, 5] = float("nan")
    x = x.to(backend.device)
    with backend.active():
        y, s = act_quant(x)
        _, s8 = act_quant(x, scale_fmt="ue8m0", scale_dtype=torch.float8_e8m0fnu)
    y, s = y.cpu(), s.cpu()
    assert torch.isnan(s[0, 0]) and torch.isnan(y[0, :128].float()).all()
    assert s8.cpu().view(torch.uint8)[0, 0] == 0xFF
    ref_y, ref_s = act_quant_ref(x.cpu()[:, 128:], 128)
    assert torch.equal(_bits(y[:, 128:]), _bits(ref_y)) and torch.equal(s[:, 1:], ref_s)
    assert not torch.isnan(s[1]).any()


@pytest.mark.parametrize("scale_fmt", [None, "ue8m0"])
def test_act_quant_inplace_writes_x(backend, scale_fmt):
    x = _special_input((4, 256), torch.bfloat16, 128).to(backend.device)
    x0 = x.clone()
    with backend.active():
        out = act_quant(x, 128, scale_fmt, inplace=True)
    assert out is x
    want = FP8.quantize(x0.cpu(), "group", 128, scale_fmt).dequantize(torch.bfloat16)
    assert torch.equal(_bits(x.cpu()), _bits(want))


@pytest.mark.parametrize("scale_fmt,block", [("ue8m0", 32), ("e4m3", 16)])
@pytest.mark.parametrize("shape", [(3, 128), (2, 2, 64)])
def test_fp4_act_quant_bit_exact(backend, scale_fmt, block, shape):
    x = _special_input(shape, torch.bfloat16, block).to(backend.device)
    with backend.active():
        q, s = fp4_act_quant(x, block, scale_fmt)
    rq, rs = fp4_act_quant_ref(x.cpu(), block, scale_fmt)
    assert q.dtype == torch.uint8 and q.shape == (*shape[:-1], shape[-1] // 2)
    assert s.dtype == (torch.float8_e8m0fnu if scale_fmt == "ue8m0" else torch.float8_e4m3fn)
    assert torch.equal(q.cpu(), rq)
    assert torch.equal(s.cpu().view(torch.uint8), rs.view(torch.uint8))

    # independent check of the layout and the error bound on plain random data: |x - e2m1(code) * s|
    # <= s (half the widest E2M1 step, 2; the E4M3 scale may round down, saturating x/s <= 6.375 to 6)
    x = torch.randn(shape)
    with backend.active():
        q, s = fp4_act_quant(x.to(backend.device), block, scale_fmt)
    sf = ue8m0_decode(s.cpu()) if scale_fmt == "ue8m0" else s.cpu().float()
    deq = (e2m1_unpack(q.cpu()).unflatten(-1, (-1, block)) * sf.unsqueeze(-1)).flatten(-2)
    assert ((deq - x).abs() <= sf.repeat_interleave(block, -1)).all()


@pytest.mark.parametrize("scale_fmt,block", [("ue8m0", 32), ("e4m3", 16)])
def test_fp4_act_quant_inplace(backend, scale_fmt, block):
    x = torch.randn(3, 128, dtype=torch.bfloat16).to(backend.device)
    x0 = x.clone()
    with backend.active():
        out = fp4_act_quant(x, block, scale_fmt, inplace=True)
    assert out is x
    rq, rs = fp4_act_quant_ref(x0.cpu(), block, scale_fmt)
    sf = ue8m0_decode(rs) if scale_fmt == "ue8m0" else rs.float()
    want = (e2m1_unpack(rq).unflatten(-1, (-1, block)) * sf.unsqueeze(-1)).flatten(-2).to(torch.bfloat16)
    assert torch.equal(_bits(x.cpu()), _bits(want))


def test_fp4_act_quant_nan_and_zero_blocks(backend):
    x = torch.randn(1, 96)
    x[0, :32] = 0.0
    x[0, 40] = float("nan")
    x = x.to(backend.device)
    with backend.active():
        q, s = fp4_act_quant(x)
    q, s = q.cpu(), s.cpu().view(torch.uint8)
    assert s[0, 1] == 0xFF and (q[0, 16:32] == 0).all()  # NaN block: NaN scale, codes 0
    assert (q[0, :16] == 0).all() and s[0, 0] == 1  # zero block: the floor 6*2^-126 -> 2^-126
    rq, rs = fp4_act_quant_ref(x.cpu())
    assert torch.equal(q, rq) and torch.equal(s, rs.view(torch.uint8))


@pytest.mark.parametrize("n,k", [(96, 256), (130, 200)])
@pytest.mark.parametrize("e8m0", [False, True])
def test_weight_dequant(backend, n, k, e8m0):
    q = FP8.quantize(torch.randn(n, k), "block", 128, "ue8m0" if e8m0 else None)
    s = q.scale.to(torch.float8_e8m0fnu) if e8m0 else q.scale
    with backend.active():
        out = weight_dequant(q.data.to(backend.device), s.to(backend.device))
    assert out.dtype == torch.bfloat16 and out.shape == (n, k)
    assert torch.equal(out.cpu(), q.dequantize(torch.bfloat16))
    assert torch.equal(out.cpu(), weight_dequant_ref(q.data, s))


def test_validation_errors():
    x = torch.randn(2, 100)
    with pytest.raises(ValueError, match="multiple of block_size"):
        act_quant(x)
    with pytest.raises(ValueError, match="ue8m0"):
        act_quant(torch.randn(2, 128), scale_dtype=torch.float8_e8m0fnu)
    with pytest.raises(ValueError, match="dtype"):
        act_quant(torch.randint(0, 3, (2, 128)))
    with pytest.raises(ValueError, match="scale_fmt"):
        fp4_act_quant(torch.randn(2, 64), scale_fmt="e5m2")
    with pytest.raises(ValueError, match="multiple of block_size"):
        fp4_act_quant(torch.randn(2, 48))
    w = torch.randn(96, 256).to(torch.float8_e4m3fn)
    with pytest.raises(ValueError, match="expected"):
        weight_dequant(w, torch.ones(2, 2))
    with pytest.raises(ValueError, match="dtype"):
        weight_dequant(w.float(), torch.ones(1, 2))


def test_ops_namespace_binds_the_function():
    """lowbit.ops.act_quant is the function, not its package (lowbit/ops/__init__ binds it)."""
    x = torch.randn(2, 128)
    y1, s1 = lowbit.ops.act_quant(x)
    y2, s2 = act_quant(x)
    assert torch.equal(_bits(y1), _bits(y2)) and torch.equal(s1, s2)


@pytest.mark.cuda
def test_cuda_compile_opcheck_graph():
    x = torch.randn(64, 512, device="cuda", dtype=torch.bfloat16)
    for args in [(x, 128, None, False), (x, 128, "ue8m0", True)]:
        torch.library.opcheck(torch.ops.lowbit.act_quant.default, args)
    torch.library.opcheck(torch.ops.lowbit.fp4_act_quant.default, (x, 32, "ue8m0"))
    torch.library.opcheck(torch.ops.lowbit.act_quant_.default, (x.clone(), 128, None))
    f = torch.compile(lambda t: act_quant(t, 128, "ue8m0", torch.float8_e8m0fnu), fullgraph=True)
    y, s = f(x)
    ry, rs = act_quant_ref(x.cpu(), 128, "ue8m0", True)
    assert torch.equal(_bits(y.cpu()), _bits(ry)) and torch.equal(s.cpu().view(torch.uint8), rs.view(torch.uint8))
    g = torch.compile(lambda t: fp4_act_quant(t.clone(), inplace=True), fullgraph=True)
    assert torch.equal(_bits(g(x).cpu()), _bits(fp4_act_quant(x.clone(), inplace=True).cpu()))
    # CUDA graph: capture, then replay on new data copied into the captured buffer
    static = x.clone()
    act_quant(static)  # warm up (compile) outside capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        gy, gs = act_quant(static)
    new = torch.randn_like(x) * 7
    static.copy_(new)
    graph.replay()
    ry, rs = act_quant_ref(new.cpu())
    assert torch.equal(_bits(gy.cpu()), _bits(ry)) and torch.equal(gs.cpu(), rs)


@pytest.mark.cuda
def test_cuda_large_bit_exact():
    x = torch.randn(1024, 7168, device="cuda", dtype=torch.bfloat16) * 4
    y, s = act_quant(x, scale_fmt="ue8m0")
    ry, rs = act_quant_ref(x.cpu(), 128, "ue8m0")
    assert torch.equal(_bits(y.cpu()), _bits(ry)) and torch.equal(s.cpu(), rs)
    q, s = fp4_act_quant(x)
    rq, rs = fp4_act_quant_ref(x.cpu())
    assert torch.equal(q.cpu(), rq) and torch.equal(s.cpu().view(torch.uint8), rs.view(torch.uint8))
