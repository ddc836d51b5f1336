"""act_quant / fp4_act_quant / weight_dequant: bit-exact with the reference on every tier."""
from __future__ import annotations

import pytest
import torch

import lowbit
from lowbit.formats import FP8, e2m1_unpack, ue8m0_decode
from lowbit.ops.act_quant import act_quant, fp4_act_quant, weight_dequant
from lowbit.ops.act_quant.reference import act_quant_ref, fp4_act_quant_ref, weight_dequant_ref
from tests._helpers import capture

# the Triton tiers only (the launch-config tests call the kernel module directly)
TRITON_TIERS = [pytest.param("interpret", marks=pytest.mark.interpret), pytest.param("cuda", marks=pytest.mark.cuda)]


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


def _hard_input(shape, dtype):
    """_special_input plus one group each with: a NaN, +inf, -inf, all -0.0 (one +0.0), subnormal
    values beside a 1.0 (quotients that underflow), an amax under the 1e-4 floor, mixed signs."""
    x = _special_input(shape, torch.float32, 128)
    x[1, 256 + 5] = float("nan")
    x[2, 384 + 7] = float("inf")
    x[2, 512 + 9] = -float("inf")
    x[3, 128:256] = -0.0
    x[3, 130] = 0.0
    x[4, 256:384] = torch.randn(128) * 1e-39
    x[4, 300] = 1.0
    x[5, :128] = torch.randn(128) * 1e-6
    x[6, :128:3] *= -1
    return x.to(dtype)


def _same_e4m3(a, b):
    """Bytes equal, or both NaN (the NaN's sign bit is the platform's: x86 makes new NaNs negative)."""
    a, b = a.view(torch.uint8), b.view(torch.uint8)
    return torch.equal(torch.where((a & 0x7F) == 0x7F, 0x7F, a), torch.where((b & 0x7F) == 0x7F, 0x7F, b))


def _same_f32(a, b):
    """Bits equal, or both NaN."""
    nan = torch.isnan(a)
    return torch.equal(nan, torch.isnan(b)) and torch.equal(_bits(a)[~nan], _bits(b)[~nan])


def _aq_configs():
    from lowbit.ops.act_quant.triton import ActQuantConfig as C

    # [7, 640] has 35 groups of 128: 256 elements per program -> 18 blocks, the last one half full
    return {
        "table": None,
        "pair 256 w2": (256, 2),
        "256 w4": C(256, 4),
        "512 w4": C(512, 4),
        "1024 w8": C(1024, 8),
        "2048 w16": C(2048, 16),
    }


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the interpreter's numpy on inf / NaN
@pytest.mark.parametrize("tier", TRITON_TIERS)
@pytest.mark.parametrize("cfg_name,dtype", [(name, torch.bfloat16) for name in _aq_configs()] + [
    (name, torch.float32) for name in ("table", "256 w4", "2048 w16")])
def test_act_quant_config_variants(tier, poison_empty, cfg_name, dtype):
    """Every launch config of the FP8 kernel is bit-exact with the reference (fp32 and UE8M0
    scales, UE8M0 bytes, in place), on awkward groups, with every output element written."""
    from lowbit.ops.act_quant import triton as aq

    cfg = _aq_configs()[cfg_name]
    device = "cuda" if tier == "cuda" else "cpu"
    x = _hard_input((7, 640), dtype)
    xd = x.to(device)
    for scale_fmt, e8m0 in [(None, False), ("ue8m0", False), ("ue8m0", True)]:
        y, s = aq.act_quant(xd, 128, scale_fmt == "ue8m0", e8m0, config=cfg)
        ry, rs = act_quant_ref(x, 128, scale_fmt, e8m0)
        assert _same_e4m3(y.cpu(), ry), (scale_fmt, e8m0)
        if e8m0:
            assert torch.equal(s.cpu().view(torch.uint8), rs.view(torch.uint8))
        else:
            assert _same_f32(s.cpu(), rs), scale_fmt
    if tier == "interpret":  # its E4M3 -> fp32 cast makes NaN finite: inf / inf * s(inf) gives inf, not NaN
        x = x.nan_to_num(nan=float("nan"), posinf=3e38, neginf=-3e38).to(dtype)
    for scale_fmt in (None, "ue8m0"):
        xi = x.to(device)
        aq.act_quant_inplace(xi, 128, scale_fmt == "ue8m0", config=cfg)
        want = FP8.quantize(x, "group", 128, scale_fmt).dequantize(dtype)
        assert _same_f32(xi.cpu().float(), want.float()), scale_fmt


def _fma32(a, b, c):
    """Exact fp32 fma (one rounding), as the GPU's: the fp64 product is exact, TwoSum gives the
    fp64 sum's error, and a sum that lands exactly between two fp32 values is settled by it."""
    p = a.double() * b.double()
    c = c.double()
    t = p + c
    z = t - p
    err = (p - (t - z)) + (c - z)
    r = t.float()
    back = r.double()
    other = torch.where(back < t, torch.nextafter(r, torch.tensor(float("inf"))), torch.nextafter(r, torch.tensor(-float("inf"))))
    tie = (err != 0) & (back != t) & (t == (back + other.double()) / 2)
    pick = torch.where(err > 0, torch.maximum(r, other), torch.minimum(r, other))
    return torch.where(tie, pick, r)


def _div_exact_emulated(x, s, pow2):
    """The FP8 kernel's division-free quotient (``_div_exact``) with the GPU's fp32 operations."""
    r = 1.0 / s
    q = x * r
    if not pow2:
        s_r = torch.where(s == float("inf"), torch.zeros_like(s), s)
        for _ in range(2):
            q = _fma32(_fma32(s_r, q, -x).neg(), r, q)
    return q


@pytest.mark.parametrize("n_scales,n", [(8, 1 << 17), pytest.param(200, 1 << 22, marks=pytest.mark.slow)])
def test_div_exact_sequence_is_true_division(n_scales, n):
    """The FP8 kernel's division-free quotient (two Markstein corrections from the
    correctly rounded reciprocal; a multiply for power-of-two scales) equals IEEE x / s bit for bit
    wherever |x / s| >= 2^-60, and gives the same E4M3 byte everywhere. The interpreter tier cannot
    show this (its fma rounds twice): this emulates the GPU's exact fp32 fma. Cases: every bf16 x
    under random scales, random fp32 x, quotients within 3 ulp of an fp32 midpoint, zeros,
    subnormals, inf / NaN groups, power-of-two scales."""
    g = torch.Generator().manual_seed(0)
    cases = []  # (x, s, power-of-two s)

    def add(x, s, pow2=False):
        cases.append((x, s.expand_as(x), torch.full_like(x, pow2, dtype=torch.bool)))

    def log_uniform(k, lo, hi):
        return torch.exp(torch.empty(k).uniform_(lo, hi, generator=g)).float()

    allbf = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.bfloat16).float()
    allbf = allbf[torch.isfinite(allbf)]
    amax = log_uniform(n_scales, -9.2, 87.3)  # 1e-4 .. 7e37
    for a in torch.cat([amax, amax.bfloat16().float()]):
        add(allbf[allbf.abs() <= a], a / torch.tensor(448.0))
    a = log_uniform(n, -9.2, 87.3)
    add(a * torch.empty(n).uniform_(-1, 1, generator=g), a / 448.0)
    # near midpoints m (25 bits, quotients 2^-11 .. 2^8): x = fp32(m * s) +- up to 3 ulp
    s = log_uniform(n, -15.3, 81.2)
    m = (torch.randint(1 << 23, 1 << 24, (n,), generator=g).double() + 0.5)
    m = m * torch.pow(2.0, torch.randint(-34, -15, (n,), generator=g).double())
    ulps = torch.randint(-3, 4, (n,), generator=g, dtype=torch.int32)
    x = ((m * s.double()).float().view(torch.int32) + ulps).view(torch.float32)
    ok = torch.isfinite(x) & ((x.double() / s.double()).abs() <= 448.01)
    add(x[ok], s[ok])
    sp = torch.tensor([0.0, -0.0, 1e-45, -1e-45, 1e-40, -1e-40, 1.2e-38, -1.2e-38, -3e-35, 5.0, -7.0])
    for sv in [2.2321429e-7, 1e-3, 1.0, 3.3e5, 7.5e35]:
        add(sp, torch.tensor(sv))
    sp = torch.tensor([0.0, -0.0, 1.0, -2.5, float("inf"), -float("inf"), float("nan")])  # an inf / NaN group's x
    for sv in [float("inf"), float("nan")]:
        add(sp, torch.tensor(sv))
    for k in (-22, -9, -1, 0, 5, 64, 120) if n_scales < 100 else range(-22, 121):  # UE8M0: 2^-22 (the 1e-4 floor) .. 2^120
        add(allbf[allbf.abs() <= 448 * 2.0**k], torch.tensor(2.0**k), pow2=True)
    xs, ss, pw = zip(*cases)
    x, s, pw = torch.cat(xs), torch.cat(ss), torch.cat(pw)
    want = x / s
    got = torch.where(pw, _div_exact_emulated(x, s, True), _div_exact_emulated(x, s, False))
    big = ~(want.abs() < 2.0**-60)
    assert _same_f32(got[big], want[big])
    e4m3 = lambda v: v.clamp(-448, 448).to(torch.float8_e4m3fn)  # noqa: E731
    assert _same_e4m3(e4m3(got), e4m3(want))


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
def test_cuda_act_quant_pdl_sees_the_previous_kernels_writes():
    """act_quant as a programmatic dependent launch (8 rows: ``pdl_launch``) inside a CUDA graph, right
    after a kernel that writes its input and followed by an fp8_gemm: bit-exact with the reference
    on every replay's new data, and the GEMM sees act_quant's output."""
    from lowbit.ops.fp8_gemm import fp8_gemm

    src = torch.randn(8, 2048, device="cuda", dtype=torch.bfloat16)
    buf = torch.empty_like(src)
    w = FP8.quantize(torch.randn(256, 2048) * 0.05, "block", 128)
    wd, ws = w.data.cuda(), w.scale.cuda()

    def step():
        torch.mul(src, 1.0, out=buf)  # a kernel writes act_quant's input
        y, s = act_quant(buf)
        return y, s, fp8_gemm(y, s, wd, ws)

    step()  # compile outside the capture
    graph, (gy, gs, gc) = capture(step)
    for scale in (3.0, 0.25):
        new = torch.randn_like(src) * scale
        src.copy_(new)
        graph.replay()
        torch.cuda.synchronize()
        ry, rs = act_quant_ref(new.cpu())
        assert torch.equal(_bits(gy.cpu()), _bits(ry)) and torch.equal(gs.cpu(), rs)
        a = FP8(ry, rs, "group", 128)
        want = a.dequantize(torch.float64) @ w.dequantize(torch.float64).T
        err = (gc.cpu().double() - want).norm() / want.norm()
        assert err < 2.0**-8


@pytest.mark.cuda
def test_cuda_large_bit_exact():
    x = torch.randn(1024, 7168, device="cuda", dtype=torch.bfloat16) * 4
    y, s = act_quant(x, scale_fmt="ue8m0")
    ry, rs = act_quant_ref(x.cpu(), 128, "ue8m0")
    assert torch.equal(_bits(y.cpu()), _bits(ry)) and torch.equal(s.cpu(), rs)
    q, s = fp4_act_quant(x)
    rq, rs = fp4_act_quant_ref(x.cpu())
    assert torch.equal(q.cpu(), rq) and torch.equal(s.cpu().view(torch.uint8), rs.view(torch.uint8))


@pytest.mark.cuda
def test_cuda_large_config_variants():
    """Some of the tuner's candidates (``lowbit tune act_quant``) on 1024 benchmark rows, fp32 and
    UE8M0 scales and UE8M0 bytes, bit-exact with the reference computed on the CPU."""
    from lowbit.ops.act_quant import triton as aq
    from lowbit.ops.act_quant.triton import ActQuantConfig as C

    x = torch.randn(1024, 7168, device="cuda", dtype=torch.bfloat16) * 4
    xc = x.cpu()
    refs = {fmt: act_quant_ref(xc, 128, *fmt) for fmt in [(None, False), ("ue8m0", False), ("ue8m0", True)]}
    for cfg in [None, C(4096, 4), C(8192, 8), C(16384, 16), C(1024, 1)]:
        for (scale_fmt, e8m0), (ry, rs) in refs.items():
            y, s = aq.act_quant(x, 128, scale_fmt == "ue8m0", e8m0, config=cfg)
            assert torch.equal(_bits(y.cpu()), _bits(ry)), (cfg, scale_fmt, e8m0)
            assert torch.equal(_bits(s.cpu()), _bits(rs)), (cfg, scale_fmt, e8m0)


# ------------------------------------------------------------------ fp4_act_quant launch variants
def _fp4_hard_input(dtype):
    """[7, 256] with, per 16-/32-element group: random values, all zeros, all -0.0 (one +0.0), a NaN,
    +inf, -inf, exact powers of two, every E2M1 tie and decision point of a power-of-two scale (amax
    6 * 2^k) and of the E4M3 scale 1.125, values past 6 * s (E4M3 scales round down), subnormals
    beside a 1.0, near fp32 max (UE8M0 byte 253), and quotients at the fp32 underflow limit
    (-2^-149 / 2 is a tie that rounds to -0: code 0x0; -2^-148 / 2 is not: 0x8)."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(7, 256, generator=g) * 3
    x[0, :32] = 0.0
    x[0, 32:64] = -0.0
    x[0, 40] = 0.0
    x[0, 64 + 5] = float("nan")
    x[0, 128 + 7] = float("inf")
    x[0, 192 + 20] = -float("inf")
    x[1] = 2.0 ** torch.randint(-12, 12, (256,), generator=g).float() * torch.where(torch.rand(256, generator=g) < 0.5, -1.0, 1.0)
    ties = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 0.2, 5.5])
    ties = torch.cat([ties, -ties])  # 32: every tie / code, both signs; amax 6
    for j, k in enumerate((-3, 0, 4, 9)):
        x[2, 32 * j:32 * (j + 1)] = ties * 2.0**k
    x[2, 128:160] = ties * 1.125  # amax 6.75: E4M3 scale 1.125 exactly (16-groups: 6 * 1.125 in each)
    x[2, 144:160] = ties[:16] * -1.125
    x[2, 160:192] = torch.linspace(-7, 7, 32)  # E4M3: s = e4m3(7/6) = 1.125, so |x| / s up to 6.2 saturates
    x[3, :32] = torch.randn(32, generator=g) * 1e-39
    x[3, 3] = 1.0
    x[3, 16 + 3] = -1.0
    x[3, 32:64] = torch.randn(32, generator=g).clamp(-3, 3) * 7.5e37
    x[3, 40] = 3.3e38
    x[3, 56] = -3.3e38
    tiny = torch.tensor([-1.0, -2.0, -3.0, 1.0, 2.0, 3.0, -5.0, 7.0]) * 2.0**-149
    x[4, :16] = torch.cat([tiny, torch.tensor([12.0, -12.0, 0.0, -0.0, 11.0, 1.0, -1.0, 0.5])])  # E4M3 scale 2, UE8M0 4
    x[4, 16:32] = torch.cat([tiny, torch.full((8,), 2688.0)])  # E4M3 scale 448
    x[4, 32:64] = torch.randn(32, generator=g) * 1e-6
    x[5, :64:3] *= -1
    x = x.to(dtype)
    if dtype == torch.bfloat16:  # subnormal bf16 values: the 3.6 interpreter's bf16 cast of them is off
        x[4, :8] = 0.0
    return x


def _fp4_configs():
    from lowbit.ops.act_quant.triton import Fp4ActQuantConfig as F

    # [7, 256] has 56 groups of 32 (112 of 16): 1024 elements per program leaves the last block partial
    return {
        "table": None,
        "pair 256 w2": (256, 2),
        "256 w4": F(256, 4),
        "1024 w1": F(1024, 1),
        "2048 w8": F(2048, 8),
    }


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the interpreter's numpy on inf / NaN
@pytest.mark.parametrize("tier", TRITON_TIERS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("scale_fmt,block", [("ue8m0", 32), ("e4m3", 16)])
@pytest.mark.parametrize("cfg_name", list(_fp4_configs()))
def test_fp4_act_quant_config_variants(tier, cfg_name, scale_fmt, block, dtype):
    """Every fp4_act_quant launch config is bit-exact with the reference (codes, scale bytes, in
    place) on awkward groups, every output written (NaN-poisoned buffers, 0xFF-filled codes)."""
    from lowbit.ops.act_quant import triton as aq
    from lowbit.ops.act_quant.reference import fp4_act_quant_dequant_ref

    cfg = _fp4_configs()[cfg_name]
    device = "cuda" if tier == "cuda" else "cpu"
    x = _fp4_hard_input(dtype)
    e4m3 = scale_fmt == "e4m3"
    real_empty = torch.empty

    def poisoned(*args, **kwargs):  # as poison_empty, for the kernel's buffers only; uint8 codes 0xFF
        t = real_empty(*args, **kwargs)
        return t.view(torch.uint8).fill_(0xFF).view(t.dtype) if t.element_size() == 1 else t.fill_(float("nan"))

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch, "empty", poisoned)
        q, s = aq.fp4_act_quant(x.to(device), block, e4m3, config=cfg)
    rq, rs = fp4_act_quant_ref(x, block, scale_fmt)
    assert s.dtype == rs.dtype
    bad = (q.cpu() != rq).nonzero()
    assert bad.numel() == 0, (bad[:5].tolist(), q.cpu()[tuple(bad[:5].T)].tolist(), rq[tuple(bad[:5].T)].tolist())
    if e4m3:
        assert _same_e4m3(s.cpu(), rs)
        assert (rs.view(torch.uint8) & 0x7F == 0x7F).sum() == 1  # the NaN group is covered (inf: s = 448)
    else:
        assert torch.equal(s.cpu().view(torch.uint8), rs.view(torch.uint8))
        assert (rs.view(torch.uint8) == 0xFF).sum() == 3 and (rs.view(torch.uint8) == 253).any()  # NaN / inf; near max
    xi = x.clone().to(device)
    aq.fp4_act_quant_inplace(xi, block, e4m3, config=cfg)
    assert _same_f32(xi.cpu().float(), fp4_act_quant_dequant_ref(x, block, scale_fmt).float())


def test_e2m1_bit_encode_matches_thresholds():
    """_fp4_act_quant_kernel's E2M1 magnitude encode (fp32 magic add below 2, integer mantissa rounding
    above) equals the reference's threshold encode on every fp32 magnitude class: all bf16 values,
    the neighbours of every decision point, 0, subnormals, huge values and inf."""
    from lowbit.formats.e2m1 import e2m1_encode

    a = torch.arange(0, 32768, dtype=torch.int32).to(torch.int16).view(torch.bfloat16).float()
    pts = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 7.0, 8.0])
    b = pts.view(torch.int32)
    near = torch.cat([(b + d).view(torch.float32) for d in range(-3, 4)])
    a = torch.cat([a[torch.isfinite(a)], near, torch.tensor([0.0, 1e-45, 1e-40, 3.4e38, float("inf")])])
    # the kernel's arithmetic in torch (fp32 add is RNE on the CPU, as on the GPU)
    small = (a + 4194304.0).view(torch.int32) - 0x4A800000
    bits = a.view(torch.int32).long()
    big = ((bits + 0x1FFFFF + ((bits >> 22) & 1)) >> 22) - 252
    got = torch.where(a < 2.0, small.long(), big.clamp(max=7))
    assert torch.equal(got, e2m1_encode(a).long())


def test_act_quant_pdl_rule():
    """act_quant runs as a PDL launch at decode sizes only (x with at most PDL_MAX_ROWS rows,
    whatever its leading shape)."""
    from lowbit.ops.act_quant import triton as aq

    assert aq.pdl_launch(torch.empty(1, 7168)) and aq.pdl_launch(torch.empty(2, 4, 128))
    assert not aq.pdl_launch(torch.empty(aq.PDL_MAX_ROWS + 1, 128))
    assert not aq.pdl_launch(torch.empty(3, 3, 256))


# ---- empty shapes and argument types (issue #49 items 4 and 7) ---------------------------------

@pytest.mark.parametrize("shape", [(0, 128), (4, 0), (0,), (2, 0, 128)])
def test_empty_inputs_give_empty_outputs(backend, poison_empty, shape):
    """Any 0-sized dim (K = 0 included): outputs of the documented shapes, no element."""
    x = torch.zeros(shape, device=backend.device)
    with backend.active():
        y, s = act_quant(x, 128)
        q, s4 = fp4_act_quant(x, 32)
        assert act_quant(x.clone(), 128, inplace=True).shape == x.shape
        assert fp4_act_quant(x.clone(), 32, inplace=True).shape == x.shape
    k = shape[-1]
    assert y.shape == x.shape and s.shape == (*shape[:-1], k // 128)
    assert q.shape == (*shape[:-1], k // 2) and s4.shape == (*shape[:-1], k // 32)


@pytest.mark.parametrize("n, k", [(0, 128), (128, 0)])
def test_weight_dequant_empty(backend, poison_empty, n, k):
    w = torch.zeros(n, k, device=backend.device).to(torch.float8_e4m3fn)
    with backend.active():
        out = weight_dequant(w, torch.ones(-(-n // 128), -(-k // 128), device=backend.device))
    assert out.shape == (n, k) and out.dtype == torch.bfloat16


@pytest.mark.parametrize("fn", [act_quant, fp4_act_quant])
@pytest.mark.parametrize("kwargs, match", [
    (dict(block_size=True), "block_size must be a power of two"),
    (dict(block_size=32.0), "block_size must be a power of two"),
    (dict(inplace="no"), "inplace must be a bool"),
    (dict(inplace=1), "inplace must be a bool"),
    (dict(scale_fmt=["ue8m0"]), "scale_fmt must be"),
])
def test_wrong_argument_types_are_value_errors(backend, fn, kwargs, match):
    """A bool is not a block size, a truthy string is not ``inplace=True`` (it used to mutate x)."""
    x = torch.randn(2, 128, device=backend.device)
    before = x.clone()
    with backend.active(), pytest.raises(ValueError, match=match):
        fn(x, **kwargs)
    assert torch.equal(x, before)
