"""The tensor-core NVFP4 gathered kernel (``gathered/mma_nvfp4.py``) behind gathered_dot /
gathered_bias for bf16 x, against an fp64 reference of the dequantized rows (interpreter and
cuda tiers; the public ops' other tests in test_gathered.py run through it on the GPU too).

Tolerance: the decoded, scaled weights are exact in bf16 and the products exact in fp32, so the
only error is the fp32 accumulation order (tensor-core accumulation included): 1e-5 relative."""
from __future__ import annotations

import pytest
import torch

from lowbit.formats import NVFP4
from lowbit.ops import gathered_bias, gathered_dot
from lowbit.ops.gathered import dispatch, mma_nvfp4, unpack_weight
from lowbit.ops.gathered.reference import NVFP4_CODE
from tests._helpers import poisoned
from tests.ops.test_gathered import check_bias

NEEDS_TRITON = "mma_nvfp4 is a Triton kernel (inline PTX on the GPU, emulated under the interpreter): no reference tier"


@pytest.fixture
def mma_backend(backend):
    if not backend.is_triton:
        pytest.skip(NEEDS_TRITON)
    return backend


def _ref(x, w: NVFP4, index):
    rows = w.dequantize(torch.float32).double()[index.long().clamp(0, w.packed.shape[0] - 1).cpu()]
    return torch.einsum("btk,bk->bt", rows, x.double().cpu())


def _launch_dot(backend, x, w, index, cfg):
    dev = backend.device
    out = poisoned(tuple(index.shape), torch.float32, dev)
    with backend.active():
        mma_nvfp4.launch(x.to(dev), w.packed.to(dev), w.scale.view(torch.uint8).to(dev), w.global_scale.to(dev),
                         index.to(dev), w.packed.shape[1] * 2, out, None, 1.0, False, cfg)
    return out.cpu()


# (V, K, B, T, (RT, W)): a partial chunk (K = 96, 160) and K halves of unequal chunk counts,
# chunks not a multiple of W, T below / above one 8-index tile and not a multiple of it, two row
# tiles, B > 1
CASES = [(37, 64, 2, 5, (1, 1)), (50, 256, 3, 20, (2, 2)), (40, 160, 1, 17, (1, 4)), (29, 96, 2, 33, (2, 1)),
         (64, 512, 1, 8, (1, 1)), (30, 1024, 2, 16, (1, 2)), (37, 96, 2, 5, (1, 1)), (40, 160, 1, 17, (2, 2)),
         (50, 512, 3, 20, (1, 2))]


@pytest.mark.parametrize("v,k,b,t,cfg", CASES)
def test_mma_dot_vs_fp64(mma_backend, v, k, b, t, cfg):
    _check_dot(mma_backend, v, k, b, t, cfg)


# the LEAN kernel (``use_lean``: K >= 1024): whole chunks with one step a warp, a loop plus a
# peeled last step (K = 2048, W = 2), and a partial chunk (K = 1056: the scale pair convert with
# the masked loads); K < 1024 runs the plain kernel (CASES above)
@pytest.mark.parametrize("v,k,b,t,cfg", [(64, 1024, 1, 8, (2, 2)), (40, 1024, 2, 13, (1, 4)),
                                         (30, 2048, 1, 9, (1, 2)), (20, 1056, 1, 8, (1, 2))])
def test_mma_lean_vs_fp64(mma_backend, v, k, b, t, cfg):
    assert mma_nvfp4.use_lean(k) and not mma_nvfp4.use_lean(512)
    _check_dot(mma_backend, v, k, b, t, cfg)


def _check_dot(mma_backend, v, k, b, t, cfg):
    w = NVFP4.quantize(torch.randn(v, k) * torch.logspace(-2, 2, k))  # group scales far apart along a row
    x = torch.randn(b, k).to(torch.bfloat16)
    idx = torch.randint(0, v, (b, t))
    out = _launch_dot(mma_backend, x, w, idx, cfg)
    torch.testing.assert_close(out.double(), _ref(x, w, idx), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("k,cfg", [(64, (1, 1)), (1024, (1, 4))])  # the second: LEAN, row 0 read
def test_mma_bad_index_is_nan(mma_backend, k, cfg):
    w = NVFP4.quantize(torch.randn(20, k))
    x = torch.randn(1, k).to(torch.bfloat16)
    idx = torch.tensor([[3, -1, 20, 7]])
    out = _launch_dot(mma_backend, x, w, idx, cfg)
    assert torch.isnan(out[0, 1:3]).all()
    torch.testing.assert_close(out[0, [0, 3]].double(), _ref(x, w, idx)[0, [0, 3]], rtol=1e-5, atol=1e-5)


def test_mma_every_code_and_scale(mma_backend):
    """Every packed byte (all 16 x 16 code pairs) under subnormal, small, large, negative and NaN
    E4M3 scales: the decode (bf16 subnormal trick times the scale) is exact, NaN scales give NaN."""
    k = 512  # 256 bytes a row: every byte value once
    scale_bytes = [0x01, 0x07, 0x08, 0x38, 0x7E, 0xB8, 0x7F]  # 2^-9, 7*2^-9, 2^-6, 1, 448, -1, NaN
    packed = torch.arange(256, dtype=torch.uint8).repeat(len(scale_bytes), 1)
    scale = torch.tensor(scale_bytes, dtype=torch.uint8)[:, None].repeat(1, k // 16).view(torch.float8_e4m3fn)
    w = NVFP4(packed, scale, torch.tensor(0.75), 16)
    x = (torch.randn(1, k) * 4).to(torch.bfloat16)
    idx = torch.arange(len(scale_bytes))[None]
    out = _launch_dot(mma_backend, x, w, idx, (1, 2))
    ref = _ref(x, w, idx)
    assert torch.isnan(out[0, -1]) and torch.isnan(ref[0, -1])
    torch.testing.assert_close(out[0, :-1].double(), ref[0, :-1], rtol=1e-6, atol=0)


@pytest.mark.parametrize("ldt,k", [(torch.bfloat16, 128), (torch.float32, 128), (torch.bfloat16, 1024)])
def test_mma_bias(mma_backend, ldt, k, monkeypatch):
    """gathered_bias on the kernel (bf16 x, aligned rows; the public op on the GPU, the picked
    config pinned under the interpreter) scatters values + alpha * dot, leaves every other logit
    bit-identical and its inputs unchanged; duplicate indices write the same number. K = 1024:
    the picked config runs the LEAN kernel."""
    calls = []
    real = mma_nvfp4.launch
    monkeypatch.setattr(mma_nvfp4, "launch", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    dev = mma_backend.device
    v, b, t = 70, 3, 19
    w = NVFP4.quantize(torch.randn(v, k)).to(dev)
    x = torch.randn(b, k, dtype=torch.bfloat16, device=dev)
    idx = torch.stack([torch.randperm(v)[:t] for _ in range(b)])
    idx[1, 5] = idx[1, 2]  # a duplicate in a row, with the same value
    idx = idx.to(dev)
    values = torch.randn(b, t, device=dev)
    values[1, 5] = values[1, 2]
    logits = torch.randn(b, v, device=dev).to(ldt)
    before, x0, v0, i0 = logits.clone(), x.clone(), values.clone(), idx.clone()
    with mma_backend.active():
        if mma_backend.name == "cuda":
            gathered_bias(x, w, values, idx, logits, 0.5)
        else:
            fmt, data, scale, aux, _, kk, bits, gs = unpack_weight(w)
            dispatch.gathered_bias(x, fmt, data, scale, aux, values, idx, logits, 0.5, kk, bits, gs,
                                   config={"MMA": mma_nvfp4.pick_config(b, t, k)})
    assert calls == [1]
    check_bias(logits, before, idx, values.double().cpu() + 0.5 * _ref(x, w.to("cpu"), idx))
    assert torch.equal(x, x0) and torch.equal(values, v0) and torch.equal(idx, i0)


def test_mma_dispatch_rules():
    """NVFP4 with bf16 x and aligned rows on sm_90 takes the kernel; fp32 x, K % 32 != 0, rows
    starting mid-segment, another format, an older GPU or the interpreter keep the CUDA-core one."""
    w = NVFP4.quantize(torch.randn(30, 64))
    fmt, data, scale, aux, _, k, _, _ = unpack_weight(w)
    x = torch.randn(1, 64, dtype=torch.bfloat16)
    assert dispatch.mma_ok(x, fmt, data, scale, k, True)
    assert not dispatch.mma_ok(x, fmt, data, scale, k, False)  # not sm_90, or the interpreter
    assert not dispatch.mma_ok(x.float(), fmt, data, scale, k, True)
    assert not dispatch.mma_ok(x, NVFP4_CODE + 1, data, scale, k, True)
    w48 = NVFP4.quantize(torch.randn(30, 48))
    f48, d48, s48, _, _, k48, _, _ = unpack_weight(w48)
    assert not dispatch.mma_ok(torch.randn(1, 48, dtype=torch.bfloat16), f48, d48, s48, k48, True)
    shifted = NVFP4(w.packed[:, 8:], w.scale[:, 1:], w.global_scale, 16)  # rows start 8 bytes in
    fs, ds, ss, _, _, ks, _, _ = unpack_weight(shifted)
    xs = torch.randn(1, 64, dtype=torch.bfloat16)[:, 16:]
    assert not dispatch.mma_ok(xs, fs, ds, ss, ks, True)


def test_mma_dispatch_on_cpu_tensors(mma_backend, monkeypatch):
    """The interpreter tier's public ops keep the CUDA-core kernel (the MMA emulation is slow)."""
    if mma_backend.name == "cuda":
        pytest.skip("the interpreter's routing")
    calls = []
    real = mma_nvfp4.launch
    monkeypatch.setattr(mma_nvfp4, "launch", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    w = NVFP4.quantize(torch.randn(30, 64))
    with mma_backend.active():
        gathered_dot(torch.randn(1, 64, dtype=torch.bfloat16), w, torch.randint(0, 30, (1, 4)))
    assert calls == []


def test_pick_config_is_launchable():
    """The launch table gives a valid geometry for every K % 32 == 0 and B*T it can meet (no
    kernel: the launcher's own check raises on a bad tuple), and rejects malformed overrides."""
    for k in (32, 96, 256, 384, 1024, 2048, 4096, 7168, 16384):
        for b, t in ((1, 1), (1, 8), (16, 64), (64, 32), (256, 64), (1024, 64)):
            rt, w = mma_nvfp4.pick_config(b, t, k)
            assert rt in (1, 2) and w >= 1 and w & (w - 1) == 0 and w <= 8
    empty = torch.empty(0, 0, dtype=torch.long)
    for bad in ((3, 1), (1, 3), (1, 2, 1)):
        with pytest.raises(ValueError, match="RT, W"):
            mma_nvfp4.launch(None, None, None, None, torch.zeros(1, 1, dtype=torch.long), 64, None, None, 1.0, False,
                             bad)
    mma_nvfp4.launch(None, None, None, None, empty, 64, None, None, 1.0, False, (1, 1))  # empty index: no launch


@pytest.mark.cuda
@pytest.mark.parametrize("k,cfg", [(256, (1, 1)), (1024, (2, 2)), (4096, (1, 8))])
def test_cuda_mma_pdl_in_a_graph(k, cfg, monkeypatch):
    """A plain launch, the programmatic dependent launch (PDL) and PDL with the early trigger give
    the same bits; under PDL the kernel waits for the kernel right before it: in a CUDA graph
    where each gathered_bias follows the kernels that write its x, indices, values and logits,
    replays with new data are right."""
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("programmatic dependent launch: sm_90 and the GPU tier")
    v, b, t = 4000, 4, 24
    w = NVFP4.quantize(torch.randn(v, k)).to("cuda")
    xs = [torch.randn(b, k, dtype=torch.bfloat16, device="cuda") for _ in range(2)]
    # distinct indices in a row: duplicates with different values would race for one logit
    idxs = [torch.stack([torch.randperm(v)[:t] for _ in range(b)]).cuda() for _ in range(2)]
    vals = [torch.randn(b, t, device="cuda") for _ in range(2)]
    start = [torch.randn(b, v, device="cuda").to(torch.bfloat16) for _ in range(2)]
    real_options = mma_nvfp4.launch_options

    def run(pdl, trigger, src):
        monkeypatch.setattr(mma_nvfp4, "launch_options", lambda dev, p, tr, ptx: real_options(dev, pdl, trigger, ptx))
        logits = start[src].clone()
        mma_nvfp4.launch(xs[src], w.packed, w.scale.view(torch.uint8), w.global_scale, idxs[src], k, logits,
                         vals[src], 0.5, True, cfg)
        monkeypatch.setattr(mma_nvfp4, "launch_options", real_options)
        return logits

    plain = run(False, False, 0)
    assert torch.equal(plain, run(True, False, 0))
    assert torch.equal(plain, run(True, True, 0))
    x, idx, val, logits = xs[0].clone(), idxs[0].clone(), vals[0].clone(), start[0].clone()
    graph = torch.cuda.CUDAGraph()
    src = [t.clone() for t in (xs[0], idxs[0], vals[0], start[0])]  # graph inputs, overwritten before replay
    with torch.cuda.graph(graph):
        for dst, s in zip((x, idx, val, logits), src):
            dst.copy_(s)  # the kernels right before the gathered launch write every one of its inputs
        mma_nvfp4.launch(x, w.packed, w.scale.view(torch.uint8), w.global_scale, idx, k, logits, val, 0.5, True, cfg)
        mma_nvfp4.launch(x, w.packed, w.scale.view(torch.uint8), w.global_scale, idx, k, logits, val, 0.5, True, cfg)
    for s, new in zip(src, (xs[1], idxs[1], vals[1], start[1])):
        s.copy_(new)
    graph.replay()
    torch.cuda.synchronize()
    want = run(False, False, 1)
    want2 = want.clone()  # the second launch scatters onto the first's result
    mma_nvfp4.launch(xs[1], w.packed, w.scale.view(torch.uint8), w.global_scale, idxs[1], k, want2, vals[1], 0.5,
                     True, cfg)
    assert torch.equal(logits, want2)


def test_trigger_rule():
    """The early trigger: at K >= 2048 or under 2 MB of gathered rows (the measured rule)."""
    assert mma_nvfp4.use_trigger(1, 8, 256) and mma_nvfp4.use_trigger(256, 32, 256)
    assert not mma_nvfp4.use_trigger(256, 64, 256) and not mma_nvfp4.use_trigger(64, 64, 1024)
    assert mma_nvfp4.use_trigger(256, 8, 1024) and mma_nvfp4.use_trigger(256, 64, 4096)


def test_dispatch_table_rows():
    rows = dispatch.dispatch_table()
    assert [r["kernel"] for r in rows] == ["mma_nvfp4", "cuda_core", "cuda_core"]
    assert all({"op", "kernel", "gpu", "when", "config"} <= set(r) for r in rows)
