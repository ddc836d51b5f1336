"""gathered_dot / gathered_bias / gathered_rows (SPEC §3) on every tier and every format.

Tolerances. The rows are decoded exactly in fp32 (every format's dequantized value is an exact
fp32 number), so against an fp64 reference of the dequantized rows the only error of the fp32
dot is the accumulation order: about sqrt(K) * 2^-24 relative to sum|x*w|, far below 1e-5 at
these K. ``gathered_bias`` into bf16 logits adds one bf16 rounding (2^-9 relative): SPEC's
rtol=1e-2, atol=6.25e-2 (vLLM's figure); into fp32 logits, rtol=atol=1e-5.
"""
from __future__ import annotations

import dataclasses

import pytest
import torch

import lowbit
from lowbit.formats import FP8, INTx, MXFP4, NVFP4
from lowbit.ops import gathered_bias, gathered_dot, gathered_rows
from lowbit.ops.gathered import set_debug
from tests._helpers import poisoned, rel_err

FORMATS = ["bf16", "fp16", "fp32", "fp8", "nvfp4", "mxfp4", "int2", "int4", "int8"]


def make_weight(fmt: str, v: int, k: int, device, gen_rows: int | None = None):
    """A random weight in ``fmt`` and its dequantized rows in fp64 (the reference)."""
    w = torch.randn(v, k) * 0.5
    if fmt in ("bf16", "fp16", "fp32"):
        dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[fmt]
        weight = w.to(dt)
        return weight.to(device), weight.double()
    if fmt == "fp8":
        weight = FP8.quantize(w, "row")
    elif fmt == "nvfp4":
        weight = NVFP4.quantize(w)
    elif fmt == "mxfp4":
        weight = MXFP4.quantize(w)
    else:
        weight = INTx.quantize(w, bits=int(fmt[3:]), group_size=32 if fmt == "int4" else 16)
    return weight.to(device), weight.dequantize(torch.float32).double()


def row_view(weight, step: int = 2, start: int = 1):
    """Rows ``start::step`` of a weight as strided views (no copy)."""
    if isinstance(weight, torch.Tensor):
        return weight[start::step]
    fields = {f.name: getattr(weight, f.name) for f in dataclasses.fields(weight)}
    for name, t in fields.items():
        if isinstance(t, torch.Tensor) and t.dim() == 2:
            fields[name] = t[start::step]
    return type(weight)(**fields)


def ref_dot(x, w64, index):
    return torch.einsum("btk,bk->bt", w64[index.long().cpu()], x.double().cpu())


def check_bias(logits, before, idx, expect):
    """The indexed logits equal ``expect`` (fp64 [B, T]) within SPEC's bf16 tolerance (rtol 1e-2,
    atol 6.25e-2; fp32 logits: 1e-5), and every other logit is bit-identical to ``before``."""
    got = logits.cpu().gather(1, idx.long().cpu()).double()
    bf16 = logits.dtype == torch.bfloat16
    tol = dict(rtol=1e-2, atol=6.25e-2) if bf16 else dict(rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got, expect, **tol)
    untouched = torch.ones(logits.shape, dtype=torch.bool)
    untouched.scatter_(1, idx.long().cpu(), False)
    bits = torch.int16 if bf16 else torch.int32
    assert torch.equal(logits.cpu().view(bits)[untouched], before.cpu().view(bits)[untouched])


# ---------------------------------------------------------------------------------------------
# known values


def test_nvfp4_known_bytes(backend):
    # 0x31 -> [0.5, 1.5] (element 2i is the LOW nibble); 0xF7 -> [6, -6]; 0x08 -> [-0, 0]
    row0 = [0x31, 0xF7, 0x08, 0x00, 0x22, 0x00, 0x00, 0x00]
    row1 = [0x44] * 8  # every element 2.0
    packed = torch.tensor([row0, row1], dtype=torch.uint8)
    scale = torch.tensor([[2.0], [0.5]]).to(torch.float8_e4m3fn)
    w = NVFP4(packed, scale, torch.tensor(0.25), 16).to(backend.device)
    idx = torch.tensor([[0, 1, 0]], device=backend.device)
    m0 = 2.0 * 0.25
    expect0 = [0.5 * m0, 1.5 * m0, 6 * m0, -6 * m0, -0.0, 0.0, 0.0, 0.0, 1 * m0, 1 * m0] + [0.0] * 6
    expect1 = [2.0 * 0.5 * 0.25] * 16
    with backend.active():
        rows = gathered_rows(w, idx, torch.float32)
        x = torch.arange(1, 17, dtype=torch.float32, device=backend.device)[None]
        dots = gathered_dot(x, w, idx)
    assert rows.shape == (1, 3, 16)
    assert rows[0, 0].tolist() == expect0 and rows[0, 2].tolist() == expect0
    assert rows[0, 1].tolist() == expect1
    assert torch.signbit(rows[0, 0, 4]).item()  # code 0x8 is -0
    d0 = sum((i + 1) * v for i, v in enumerate(expect0))
    d1 = sum((i + 1) * v for i, v in enumerate(expect1))
    assert dots.tolist() == [[d0, d1, d0]]


def test_mxfp4_known_bytes(backend):
    packed = torch.full((1, 16), 0x31, dtype=torch.uint8)
    scale = torch.tensor([[128]], dtype=torch.uint8)  # 2^(128-127) = 2
    w = MXFP4(packed, scale).to(backend.device)
    with backend.active():
        rows = gathered_rows(w, torch.tensor([0], device=backend.device), torch.float32)
    assert rows.tolist() == [[1.0, 3.0] * 16]


# ---------------------------------------------------------------------------------------------
# random inputs vs fp64


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("xdt", [torch.bfloat16, torch.float32])
def test_dot_vs_fp64(backend, fmt, xdt):
    v, k, b, t = 37, 64, 3, 5  # T odd, not a power of two
    weight, w64 = make_weight(fmt, v, k, backend.device)
    x = torch.randn(b, k).to(xdt).to(backend.device)
    idx = torch.randint(0, v, (b, t), device=backend.device)
    x0 = x.clone()
    with backend.active():
        out = gathered_dot(x, weight, idx)
    assert out.dtype == torch.float32 and out.shape == (b, t)
    torch.testing.assert_close(out.double().cpu(), ref_dot(x, w64, idx), rtol=1e-5, atol=1e-5)
    assert torch.equal(x, x0)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("ldt", [torch.bfloat16, torch.float32])
def test_bias_vs_fp64(backend, fmt, ldt):
    v, k, b, t = 41, 96 if fmt != "mxfp4" else 64, 2, 7
    weight, w64 = make_weight(fmt, v, k, backend.device)
    x = torch.randn(b, k, dtype=torch.bfloat16, device=backend.device)
    idx = torch.stack([torch.randperm(v)[:t] for _ in range(b)]).to(backend.device)
    values = torch.randn(b, t, device=backend.device)
    logits = torch.randn(b, v).to(ldt).to(backend.device)
    before = logits.clone()
    values0 = values.clone()
    alpha = 0.75
    with backend.active():
        ret = gathered_bias(x, weight, values, idx, logits, alpha)
    assert ret is logits
    check_bias(logits, before, idx, values.double().cpu() + alpha * ref_dot(x, w64, idx))
    assert torch.equal(values, values0)


@pytest.mark.parametrize("b,t", [(1, 1), (1, 3), (4, 16)])
def test_shapes_nvfp4(backend, b, t):
    v, k = 29, 48  # K not a power of two
    weight, w64 = make_weight("nvfp4", v, k, backend.device)
    x = torch.randn(b, k, device=backend.device)
    idx = torch.randint(0, v, (b, t), device=backend.device, dtype=torch.int32)
    with backend.active():
        out = gathered_dot(x, weight, idx)
    torch.testing.assert_close(out.double().cpu(), ref_dot(x, w64, idx), rtol=1e-5, atol=1e-5)


def test_large_k_reduction(backend):
    """K spanning several tiles of the K loop (the kernel tile is 1024 units at most)."""
    k = 2560 if backend.name != "interpret" else 1056
    weight, w64 = make_weight("nvfp4", 9, k, backend.device)
    x = torch.randn(2, k, device=backend.device)
    idx = torch.tensor([[0, 8, 3], [5, 5, 1]], device=backend.device)
    with backend.active():
        out = gathered_dot(x, weight, idx)
    assert rel_err(out, ref_dot(x, w64, idx)) < 1e-6


def test_duplicate_indices(backend):
    """Duplicates with equal values: every write is the same number, so the result is defined."""
    weight, w64 = make_weight("nvfp4", 23, 32, backend.device)
    x = torch.randn(2, 32, device=backend.device)
    idx = torch.tensor([[3, 7, 3, 3], [1, 1, 2, 1]], device=backend.device)
    values = torch.randn(2, 23, device=backend.device).gather(1, idx)  # equal at equal indices
    logits = torch.full((2, 23), float("-inf"), device=backend.device)
    with backend.active():
        gathered_bias(x, weight, values, idx, logits, 1.0)
    expect = values.double().cpu() + ref_dot(x, w64, idx)
    torch.testing.assert_close(logits.cpu().gather(1, idx.cpu()).double(), expect, rtol=1e-5, atol=1e-5)
    assert int(torch.isfinite(logits).sum()) == 4  # two distinct columns per row


def _with_gpu_config(x, weight, idx, values, logits):
    """gathered_dot / gathered_bias on the CUDA-core kernel with the GPU's config-table row (the
    interpreter otherwise runs taller tiles), so both launch geometries are checked on CPU."""
    from lowbit.ops.gathered import cuda_core, dispatch, unpack_weight

    fmt, data, scale, aux, _, k, bits, gs = unpack_weight(weight)
    cfg = cuda_core.dot_config(*idx.shape)
    out = dispatch.gathered_dot(x, fmt, data, scale, aux, idx, k, bits, gs, config=cfg)
    dispatch.gathered_bias(x, fmt, data, scale, aux, values, idx, logits, 1.0, k, bits, gs, config=cfg)
    return out


@pytest.mark.parametrize("launch_table", ["tier", "gpu-configs"])
@pytest.mark.parametrize("fmt", ["bf16", "fp8", "nvfp4", "mxfp4", "int4"])
def test_strided_views(backend, fmt, launch_table):
    if launch_table == "gpu-configs" and backend.name != "interpret":
        pytest.skip("the GPU config table is what the other tiers run anyway")
    v, k, b, t = 40, 64, 2, 3
    full, full64 = make_weight(fmt, v, k, backend.device)
    weight, w64 = row_view(full), full64[1::2]
    data = weight if isinstance(weight, torch.Tensor) else weight.data if fmt == "fp8" else weight.packed
    assert not data.is_contiguous()  # the op must read the view in place
    xbig = torch.randn(b, 2 * k, device=backend.device)
    x = xbig[:, ::2]  # non-unit inner stride
    # distinct indices per row (a duplicate with different values has no single right answer:
    # one write wins), laid out column-major
    idx = torch.stack([torch.randperm(v // 2)[:t] for _ in range(b)]).to(backend.device).t().contiguous().t()
    lbig = torch.zeros(b, v // 2 + 5, device=backend.device)
    logits = lbig[:, 2: 2 + v // 2]
    values = torch.randn(t, b, device=backend.device).t()
    with backend.active():
        if launch_table == "gpu-configs":
            out = _with_gpu_config(x, weight, idx, values, logits)
        else:
            out = gathered_dot(x, weight, idx)
            gathered_bias(x, weight, values, idx, logits, 1.0)
    torch.testing.assert_close(out.double().cpu(), ref_dot(x, w64, idx), rtol=1e-5, atol=1e-5)
    expect = values.double().cpu() + ref_dot(x, w64, idx)
    torch.testing.assert_close(logits.cpu().gather(1, idx.long().cpu()).double(), expect, rtol=1e-5, atol=1e-5)
    assert torch.count_nonzero(lbig[:, :2]) == 0 and torch.count_nonzero(lbig[:, 2 + v // 2:]) == 0


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_rows_exact(backend, fmt, dtype):
    """gathered_rows decodes in the format's own order: bit-exact with dequantize()[index]."""
    v, k = 19, 64
    weight, w64 = make_weight(fmt, v, k, backend.device)
    idx = torch.randint(0, v, (2, 3, 2), device=backend.device)
    with backend.active():
        rows = gathered_rows(weight, idx, dtype)
    assert rows.shape == (2, 3, 2, k) and rows.dtype == dtype
    full = weight.float() if isinstance(weight, torch.Tensor) else weight.dequantize(torch.float32)
    torch.testing.assert_close(rows.cpu(), full.cpu()[idx.cpu()].to(dtype), rtol=0, atol=0)


def test_rows_strided(backend):
    full, _ = make_weight("mxfp4", 30, 64, backend.device)
    weight = row_view(full, 3, 2)
    idx = torch.tensor([0, 9, 4], device=backend.device)
    with backend.active():
        rows = gathered_rows(weight, idx, torch.float32)
    torch.testing.assert_close(rows.cpu(), full.dequantize().cpu()[2::3][idx.cpu()], rtol=0, atol=0)


def test_empty(backend):
    weight, _ = make_weight("nvfp4", 8, 32, backend.device)
    with backend.active():
        out = gathered_dot(torch.randn(2, 32, device=backend.device), weight,
                           torch.zeros(2, 0, dtype=torch.long, device=backend.device))
        rows = gathered_rows(weight, torch.zeros(0, dtype=torch.long, device=backend.device))
    assert out.shape == (2, 0) and rows.shape == (0, 32)


# ---------------------------------------------------------------------------------------------
# index range: ValueError on the reference path and in debug mode; safe without it


def test_out_of_range_reference():
    weight, _ = make_weight("nvfp4", 10, 32, "cpu")
    with lowbit.backend("reference"):
        with pytest.raises(ValueError, match="index value 10 is out of range"):
            gathered_dot(torch.randn(1, 32), weight, torch.tensor([[1, 10]]))
        with pytest.raises(ValueError, match="index value -1"):
            gathered_rows(weight, torch.tensor([-1]))
        logits = torch.zeros(1, 10)
        with pytest.raises(ValueError, match="index value 12"):
            gathered_bias(torch.randn(1, 32), weight, torch.zeros(1, 1), torch.tensor([[12]]), logits)
        assert torch.count_nonzero(logits) == 0


@pytest.mark.parametrize("tier", [pytest.param("interpret", marks=pytest.mark.interpret),
                                  pytest.param("cuda", marks=pytest.mark.cuda)])
def test_out_of_range_kernel(tier):
    dev = "cuda" if tier == "cuda" else "cpu"
    weight, w64 = make_weight("nvfp4", 10, 32, dev)
    x = torch.randn(1, 32, device=dev)
    idx = torch.tensor([[1, 10, -3]], device=dev)
    with lowbit.backend("triton"):
        set_debug(True)
        try:
            with pytest.raises(ValueError, match="index value 10"):
                gathered_dot(x, weight, idx)
        finally:
            set_debug(False)
        out = gathered_dot(x, weight, idx)  # no debug: the bad entries read nothing, give NaN
        rows = gathered_rows(weight, idx, torch.float32)
        logits = torch.zeros(1, 10, device=dev)
        gathered_bias(x, weight, torch.ones(1, 3, device=dev), idx, logits)
    torch.testing.assert_close(out[0, 0].double().cpu(), ref_dot(x, w64, idx[:, :1])[0, 0], rtol=1e-5, atol=1e-5)
    assert out[0, 1:].isnan().all() and rows[0, 1:].isnan().all() and not rows[0, 0].isnan().any()
    assert torch.count_nonzero(logits) == 1 and logits[0, 1] != 0


# ---------------------------------------------------------------------------------------------
# validation: every ValueError, before any launch


def _forge(cls, **fields):
    """A format instance that skips __post_init__ (to reach the op's own checks)."""
    obj = object.__new__(cls)
    for name, value in fields.items():
        object.__setattr__(obj, name, value)
    return obj


def test_validation_errors():
    x = torch.randn(2, 32)
    idx = torch.zeros(2, 3, dtype=torch.long)
    w = torch.randn(10, 32)
    nv = NVFP4.quantize(w)
    vals = torch.zeros(2, 3)
    logits = torch.zeros(2, 10)
    cases = [
        (lambda: gathered_dot(x, _forge(NVFP4, packed=nv.packed, scale=nv.scale, global_scale=nv.global_scale, group_size=32), idx),
         "NVFP4 group size must be 16, got 32"),
        (lambda: gathered_dot(torch.randn(2, 24), _forge(NVFP4, packed=torch.zeros(10, 12, dtype=torch.uint8),
                                                         scale=nv.scale, global_scale=nv.global_scale, group_size=16), idx),
         "K % 16 == 0, got K=24"),
        (lambda: gathered_dot(x, _forge(MXFP4, packed=nv.packed, scale=nv.scale, rounding="floor", group_size=16), idx),
         "MXFP4 group size must be 32, got 16"),
        (lambda: gathered_dot(x, FP8.quantize(w, "tensor"), idx), "granularity must be 'row'.*'tensor'"),
        (lambda: gathered_dot(x, w[None], idx), r"dense weight must be 2-D.*\(1, 10, 32\)"),
        (lambda: gathered_dot(x, w.to(torch.int32), idx), "dense weight has dtype torch.int32"),
        (lambda: gathered_dot(x, "weight", idx), "got str"),
        (lambda: gathered_dot(torch.randn(2, 16), w, idx), r"x has shape \(2, 16\) but the weight has K=32"),
        (lambda: gathered_dot(x.to(torch.int64), w, idx), "x has dtype torch.int64"),
        (lambda: gathered_dot(x, w, idx.float()), "index has dtype torch.float32"),
        (lambda: gathered_dot(x, w, idx[0]), r"index must have 2 dims, got shape \(3,\)"),
        (lambda: gathered_dot(x, w, torch.zeros(3, 3, dtype=torch.long)), r"index has shape \(3, 3\) but x has B=2"),
        (lambda: gathered_dot(x.to("meta"), w, idx), "one device.*x on meta"),
        (lambda: gathered_bias(x, w, vals[:, :2], idx, logits), r"values has shape \(2, 2\)"),
        (lambda: gathered_bias(x, w, vals.long(), idx, logits), "values has dtype torch.int64"),
        (lambda: gathered_bias(x, w, vals, idx, torch.zeros(2, 11)), r"logits has shape \(2, 11\)"),
        (lambda: gathered_bias(x, w, vals, idx, logits.long()), "logits has dtype torch.int64"),
        (lambda: gathered_bias(x, w, vals, idx, logits, alpha=torch.tensor(1.0)), "alpha must be a Python float"),
        (lambda: gathered_bias(x, w, vals, idx.to("meta"), logits), "one device.*index on meta"),
        (lambda: gathered_rows(nv, idx, torch.int8), "dtype must be one of.*torch.int8"),
        (lambda: gathered_rows(nv, idx.float()), "index has dtype torch.float32"),
        (lambda: gathered_rows(w, torch.tensor([[10]])), "index value 10 is out of range"),
    ]
    for fn, pattern in cases:
        with pytest.raises(ValueError, match=pattern):
            fn()
    assert torch.count_nonzero(logits) == 0


# ---------------------------------------------------------------------------------------------
# torch.library: opcheck, compile, CUDA graphs


def _op_args(fmt, device):
    from lowbit.ops.gathered import unpack_weight

    weight, _ = make_weight(fmt, 20, 64, device)
    f, data, scale, aux, v, k, bits, gs = unpack_weight(weight)
    x = torch.randn(3, 64, device=device)
    idx = torch.randint(0, 20, (3, 4), device=device)
    return (f, data, scale, aux, k, bits, gs), x, idx


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("fmt", ["bf16", "fp8", "nvfp4", "mxfp4", "int2"])
def test_opcheck(device, fmt):
    (f, data, scale, aux, k, bits, gs), x, idx = _op_args(fmt, device)
    torch.library.opcheck(torch.ops.lowbit.gathered_dot.default, (x, data, scale, aux, idx, f, k, bits, gs))
    logits = torch.randn(3, 20, device=device)
    values = torch.randn(3, 4, device=device)
    torch.library.opcheck(torch.ops.lowbit.gathered_bias.default,
                          (x, data, scale, aux, values, idx, logits, 0.5, f, k, bits, gs))
    torch.library.opcheck(torch.ops.lowbit.gathered_rows.default,
                          (data, scale, aux, idx, f, k, bits, gs, torch.bfloat16))


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_compile_fullgraph(device):
    weight, _ = make_weight("nvfp4", 50, 64, device)
    table, _ = make_weight("mxfp4", 50, 64, device)
    x = torch.randn(2, 64, device=device, dtype=torch.bfloat16)
    idx = torch.randint(0, 50, (2, 5), device=device)
    values = torch.randn(2, 5, device=device)

    def step(x, values, idx, logits):
        emb = gathered_rows(table, idx[:, :1], torch.bfloat16).squeeze(1)
        d = gathered_dot(x + emb, weight, idx)
        gathered_bias(x, weight, values, idx, logits, 0.5)
        return d

    # CPU: aot_eager keeps this tier free of a C++ toolchain; CUDA: the real inductor path
    compiled = torch.compile(step, fullgraph=True, backend="inductor" if device == "cuda" else "aot_eager")
    l1 = torch.full((2, 50), -1.0, device=device)
    l2 = l1.clone()
    d1 = compiled(x, values, idx, l1)
    d2 = step(x, values, idx, l2)
    torch.testing.assert_close(d1, d2, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(l1, l2, rtol=1e-6, atol=1e-6)


@pytest.mark.cuda
@pytest.mark.parametrize("fmt", ["bf16", "fp8", "nvfp4", "mxfp4", "int4"])
def test_cuda_graph_replay(fmt):
    v, k, b, t = 1000, 256, 4, 9
    weight, w64 = make_weight(fmt, v, k, "cuda")
    x = torch.randn(b, k, device="cuda", dtype=torch.bfloat16)
    idx = torch.randint(0, v, (b, t), device="cuda")
    values = torch.randn(b, t, device="cuda")
    logits = torch.full((b, v), float("-inf"), device="cuda")
    out = gathered_dot(x, weight, idx)  # warm up: compile the kernels outside the capture
    gathered_bias(x, weight, values, idx, logits)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = gathered_dot(x, weight, idx)
        gathered_bias(x, weight, values, idx, logits, 0.5)
    for _ in range(2):
        x.copy_(torch.randn(b, k, device="cuda"))
        idx.copy_(torch.stack([torch.randperm(v, device="cuda")[:t] for _ in range(b)]))
        values.copy_(torch.randn(b, t, device="cuda"))
        logits.fill_(float("-inf"))
        g.replay()
        torch.cuda.synchronize()
        ref = ref_dot(x, w64, idx)
        torch.testing.assert_close(out.double().cpu(), ref, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(logits.gather(1, idx).double().cpu(), values.double().cpu() + 0.5 * ref,
                                   rtol=1e-5, atol=1e-5)
        assert int(torch.isfinite(logits).sum()) == b * t


@pytest.mark.cuda
def test_cuda_large_shapes_vs_reference():
    """The bench regime (V = 131072, NVFP4) against the reference, every launch-config row."""
    v = 131072
    for k, b, t in [(256, 1, 8), (1024, 16, 32), (4096, 64, 64), (256, 256, 64)]:
        w = NVFP4.quantize(torch.randn(v, k, device="cuda") * 0.02)
        x = torch.randn(b, k, device="cuda", dtype=torch.bfloat16)
        # distinct per row: gathered_bias with a duplicate index keeps one write (of different values)
        idx = torch.rand(b, v, device="cuda").topk(t, dim=1).indices
        out = gathered_dot(x, w, idx)
        with lowbit.backend("reference"):
            ref = gathered_dot(x, w, idx)
        assert rel_err(out, ref) < 1e-5, (k, b, t)
        logits = poisoned((b, v), torch.bfloat16, "cuda")
        values = torch.randn(b, t, device="cuda")
        gathered_bias(x, w, values, idx, logits)
        torch.testing.assert_close(logits.gather(1, idx).float(), (values + ref).bfloat16().float(), rtol=1e-2, atol=6.25e-2)


# ---- empty shapes, aliasing and argument types (issue #49 items 4 and 7) -----------------------

@pytest.mark.parametrize("b, t, k", [(0, 4, 64), (3, 0, 64), (0, 0, 64), (3, 4, 0)])
def test_empty_shapes(backend, poison_empty, b, t, k):
    """B = 0 / T = 0: empty results, nothing written; K = 0: dots are 0 (an empty sum), so
    gathered_bias writes ``values``."""
    dev = backend.device
    w = torch.randn(16, k, device=dev)
    x = torch.randn(b, k, device=dev)
    idx = torch.randint(0, 16, (b, t), device=dev)
    values = torch.randn(b, t, device=dev)
    logits = torch.full((b, 16), -7.0, device=dev)
    with backend.active():
        dots = gathered_dot(x, w, idx)
        gathered_bias(x, w, values, idx, logits)
        rows = gathered_rows(w, idx, torch.float32)
    assert dots.shape == (b, t) and rows.shape == (b, t, k)
    assert (dots == 0).all()
    expect = torch.full((b, 16), -7.0, device=dev)
    if b and t:
        expect.scatter_(1, idx, values)
    assert torch.equal(logits, expect)


def test_empty_table_refused(backend):
    """V = 0 leaves no index in range: a ValueError on every path (the kernel path used to
    return its out-of-range filler)."""
    dev = backend.device
    w = torch.randn(0, 32, device=dev)
    x, idx = torch.randn(2, 32, device=dev), torch.zeros(2, 3, dtype=torch.int64, device=dev)
    with backend.active():
        for call in (lambda: gathered_dot(x, w, idx), lambda: gathered_rows(w, idx),
                     lambda: gathered_bias(x, w, torch.zeros(2, 3, device=dev), idx, torch.zeros(2, 0, device=dev))):
            with pytest.raises(ValueError, match="V = 0 rows"):
                call()
        assert gathered_dot(x, w, idx[:, :0]).shape == (2, 0)  # nothing to look up: fine


@pytest.mark.parametrize("make", [
    lambda dev: torch.zeros(1, 16, device=dev).expand(3, 16),  # stride-0 rows
    lambda dev: torch.zeros(3, 1, device=dev).expand(3, 16),  # stride-0 columns
    lambda dev: torch.zeros(40, device=dev).as_strided((3, 16), (8, 1)),  # overlapping rows
])
def test_self_overlapping_logits_refused(backend, make):
    """logits is written in place: a view whose elements share memory would be written through
    the alias (the Triton path accepted it), so refuse it before any launch."""
    dev = backend.device
    w, x = torch.randn(16, 32, device=dev), torch.randn(3, 32, device=dev)
    idx = torch.randint(0, 16, (3, 4), device=dev)
    logits = make(dev)
    before = logits.clone()
    with backend.active(), pytest.raises(ValueError, match="logits .* share memory"):
        gathered_bias(x, w, torch.zeros(3, 4, device=dev), idx, logits)
    assert torch.equal(logits, before)


def test_non_overlapping_strided_logits_still_accepted(backend):
    dev = backend.device
    w, x = torch.randn(16, 32, device=dev), torch.randn(3, 32, device=dev)
    idx = torch.randint(0, 16, (3, 4), device=dev)
    base = torch.zeros(16, 3, device=dev)
    logits = base.t()  # column-major, distinct elements
    with backend.active():
        gathered_bias(x, w, torch.zeros(3, 4, device=dev), idx, logits)
    assert logits.abs().sum() > 0


@pytest.mark.parametrize("call, match", [
    (lambda x, w, i, dev: gathered_rows(w, i, "bfloat16"), "dtype must be one of"),
    (lambda x, w, i, dev: gathered_bias(x, w, torch.zeros(2, 3, device=dev), i, torch.zeros(2, 16, device=dev),
                                        alpha=True), "alpha must be a Python float"),
    (lambda x, w, i, dev: gathered_bias(x, w, torch.zeros(2, 3, device=dev), i, torch.zeros(2, 16, device=dev),
                                        alpha="1"), "alpha must be a Python float"),
    (lambda x, w, i, dev: gathered_dot(x, w, i.float()), "index has dtype"),
    (lambda x, w, i, dev: gathered_dot(x.tolist(), w, i), "x must be a torch.Tensor"),
    (lambda x, w, i, dev: gathered_dot(x, w.tolist(), i), "weight must be"),
])
def test_wrong_argument_types_are_value_errors(backend, call, match):
    dev = backend.device
    x, w, idx = torch.randn(2, 32, device=dev), torch.randn(16, 32, device=dev), torch.zeros(2, 3, dtype=torch.int64, device=dev)
    with backend.active(), pytest.raises(ValueError, match=match):
        call(x, w, idx, dev)


# ---- an oracle that decodes the stored bytes itself (issue #49 item 10) ------------------------

@pytest.mark.parametrize("kind", ["fp8", "nvfp4", "mxfp4", "intx2", "intx4", "intx8"])
def test_against_byte_level_oracle(backend, poison_empty, kind):
    """The expectations above come from the formats' ``dequantize``, which the reference path
    also uses: a decode bug shared by both (e.g. INTx without its zero point) would pass them.
    Here the rows are decoded from the bytes by the fuzz suite's independent decoders (integer
    bit fields, plane unpacking, ``(code - zero) * scale``) and the dots summed in fp64.
    Bound: fp32 products and K-term accumulation, plus <= 3 roundings of the fp32 decode:
    (K + 4) u_f32 sum |x w| (see tests/fuzz/test_fuzz_ops.py: dot_bound)."""
    from tests.fuzz.test_fuzz_ops import dec_weight, dot_bound, make_weight

    gen = torch.Generator().manual_seed(7)
    # K = 80: INTx pads it to whole planes (2 bits: 128), FP4 groups 32 do not apply (K = 96)
    k = 96 if kind in ("nvfp4", "mxfp4") else 80
    w = make_weight(kind, 24, k, gen, 0.5)
    if kind.startswith("intx"):
        assert (w.zero > 0).any()  # the zero point matters for these weights
    w64 = dec_weight(w)
    x = torch.randn(3, k, generator=gen)
    idx = torch.randint(0, 24, (3, 7), generator=gen)
    dev = backend.device
    wd = dataclasses.replace(w, **{f.name: getattr(w, f.name).to(dev) for f in dataclasses.fields(w)
                                   if isinstance(getattr(w, f.name), torch.Tensor)})
    with backend.active():
        dots = gathered_dot(x.to(dev), wd, idx.to(dev))
        rows = gathered_rows(wd, idx.to(dev), torch.float32)
    expect = torch.einsum("bk,btk->bt", x.double(), w64[idx])
    err = (dots.cpu().double() - expect).abs()
    assert (err <= dot_bound(x.double(), w64, idx, k)).all()
    # rows in fp32: <= 3 roundings of the decode
    assert ((rows.cpu().double() - w64[idx]).abs() <= 3 * 2.0**-24 * w64[idx].abs()).all()
