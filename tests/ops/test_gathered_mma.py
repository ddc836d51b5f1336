"""The tensor-core NVFP4 gathered kernel (``gathered/triton_mma.py``) behind gathered_dot /
gathered_bias for bf16 x, against an fp64 reference of the dequantized rows (interpreter and
cuda tiers; the public ops' other tests in test_gathered.py run through it on the GPU too).

Tolerance: the decoded, scaled weights are exact in bf16 and the products exact in fp32, so the
only error is the fp32 accumulation order (tensor-core accumulation included): 1e-5 relative."""
from __future__ import annotations

import pytest
import torch

from lowbit.formats import NVFP4
from lowbit.ops import gathered_bias, gathered_dot
from lowbit.ops.gathered import triton_mma
from tests._helpers import poisoned
from tests.ops.test_gathered import check_bias

NEEDS_TRITON = "triton_mma is a Triton kernel (inline PTX on the GPU, emulated under the interpreter): no reference tier"


@pytest.fixture
def mma_backend(backend, monkeypatch):
    if not backend.is_triton:
        pytest.skip(NEEDS_TRITON)
    monkeypatch.setattr(triton_mma, "INTERPRET_DISPATCH", True)
    return backend


def _ref(x, w: NVFP4, index):
    rows = w.dequantize(torch.float32).double()[index.long().clamp(0, w.packed.shape[0] - 1).cpu()]
    return torch.einsum("btk,bk->bt", rows, x.double().cpu())


def _launch_dot(backend, x, w, index, cfg):
    dev = backend.device
    out = poisoned(tuple(index.shape), torch.float32, dev)
    with backend.active():
        triton_mma.launch(x.to(dev), w.packed.to(dev), w.scale.view(torch.uint8).to(dev), w.global_scale.to(dev),
                          index.to(dev), w.packed.shape[1] * 2, out, None, 1.0, False, cfg)
    return out.cpu()


# (V, K, B, T, (RT, W, D[, SPLIT])): a partial chunk (K = 96, 160), chunks not a multiple of W, T below /
# above one 16-row tile and not a multiple of it, two row tiles, B > 1, prefetch rings of 1-4
# chunks (deeper than the row: masked chunks)
CASES = [(37, 64, 2, 5, (1, 1, 1)), (50, 256, 3, 20, (2, 2, 2)), (40, 160, 1, 17, (1, 4, 1)), (29, 96, 2, 33, (2, 1, 3)),
         (64, 512, 1, 8, (1, 1, 4)), (30, 1024, 2, 16, (1, 2, 3)),
         # SPLIT (8 indices a tile, K halves on rows g / g + 8): K = 96 / 160 halves of unequal
         # chunk counts, two row tiles, T not a multiple of 8
         (37, 96, 2, 5, (1, 1, 1, 1)), (40, 160, 1, 17, (2, 2, 1, 1)), (50, 512, 3, 20, (1, 2, 2, 1))]


@pytest.mark.parametrize("v,k,b,t,cfg", CASES)
def test_mma_dot_vs_fp64(mma_backend, v, k, b, t, cfg):
    _check_dot(mma_backend, v, k, b, t, cfg)


# LEAN (``use_lean``: SPLIT, K >= 1024) and the old kernel on the same cases: whole chunks with
# one step a warp, a loop plus a peeled tail of three (K = 2048, W = 2, D = 3), and a partial chunk
# (K = 1056: the LEAN scale convert with the masked loads)
@pytest.mark.parametrize("lean", [False, True])
@pytest.mark.parametrize("v,k,b,t,cfg", [(64, 1024, 1, 8, (2, 2, 1, 1)), (40, 1024, 2, 13, (1, 4, 2, 1)),
                                         (30, 2048, 1, 9, (1, 2, 3, 1)), (20, 1056, 1, 8, (1, 2, 1, 1))])
def test_mma_variants_vs_fp64(mma_backend, v, k, b, t, cfg, lean, monkeypatch):
    monkeypatch.setattr(triton_mma, "LEAN", lean)
    assert triton_mma.use_lean(k, cfg[3]) == lean
    _check_dot(mma_backend, v, k, b, t, cfg)


def _check_dot(mma_backend, v, k, b, t, cfg):
    w = NVFP4.quantize(torch.randn(v, k) * torch.logspace(-2, 2, k))  # group scales far apart along a row
    x = torch.randn(b, k).to(torch.bfloat16)
    idx = torch.randint(0, v, (b, t))
    out = _launch_dot(mma_backend, x, w, idx, cfg)
    torch.testing.assert_close(out.double(), _ref(x, w, idx), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("k,cfg", [(64, (1, 1, 2)), (1024, (1, 4, 1, 1))])  # the second: LEAN, row 0 read
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
    out = _launch_dot(mma_backend, x, w, idx, (1, 2, 2))
    ref = _ref(x, w, idx)
    assert torch.isnan(out[0, -1]) and torch.isnan(ref[0, -1])
    torch.testing.assert_close(out[0, :-1].double(), ref[0, :-1], rtol=1e-6, atol=0)


@pytest.mark.parametrize("ldt,k", [(torch.bfloat16, 128), (torch.float32, 128), (torch.bfloat16, 1024)])
def test_mma_public_bias(mma_backend, ldt, k, monkeypatch):
    """The public gathered_bias takes the kernel (bf16 x, aligned rows), scatters values + alpha
    * dot, leaves every other logit bit-identical and its inputs unchanged; duplicate indices
    write the same number. K = 1024: the picked config runs the LEAN kernel."""
    calls = []
    real = triton_mma.launch
    monkeypatch.setattr(triton_mma, "launch", lambda *a, **kw: calls.append(1) or real(*a, **kw))
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
        gathered_bias(x, w, values, idx, logits, 0.5)
    assert calls == [1]
    check_bias(logits, before, idx, values.double().cpu() + 0.5 * _ref(x, w.to("cpu"), idx))
    assert torch.equal(x, x0) and torch.equal(values, v0) and torch.equal(idx, i0)


def test_mma_dispatch_rules(mma_backend, monkeypatch):
    """fp32 x, K % 32 != 0 and misaligned row views keep the CUDA-core kernel (same results)."""
    calls = []
    real = triton_mma.launch
    monkeypatch.setattr(triton_mma, "launch", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    dev = mma_backend.device
    w = NVFP4.quantize(torch.randn(30, 64)).to(dev)
    idx = torch.randint(0, 30, (1, 4), device=dev)
    x = torch.randn(1, 64, device=dev)
    with mma_backend.active():
        ref = gathered_dot(x, w, idx)  # fp32 x: CUDA-core kernel
        assert calls == []
        gathered_dot(x.to(torch.bfloat16), w, idx)
        assert calls == [1]
        w48 = NVFP4.quantize(torch.randn(30, 48)).to(dev)  # K % 32 != 0
        gathered_dot(torch.randn(1, 48, device=dev, dtype=torch.bfloat16), w48, idx)
        assert calls == [1]
        shifted = NVFP4(w.packed[:, 8:], w.scale[:, 1:], w.global_scale, 16)  # rows start 8 bytes in
        out = gathered_dot(x[:, 16:].to(torch.bfloat16), shifted, idx)
        assert calls == [1]
    assert out.shape == ref.shape


def test_pick_config_is_launchable():
    """The launch table gives a valid geometry for every K % 32 == 0 and B*T it can meet (no
    kernel: the launcher's own check raises on a bad tuple), and rejects malformed overrides."""
    for k in (32, 96, 256, 384, 1024, 2048, 4096, 7168, 16384):
        for b, t in ((1, 1), (1, 8), (16, 64), (64, 32), (256, 64), (1024, 64)):
            rt, w, d, split = triton_mma.pick_config(b, t, k)
            assert rt in (1, 2) and w >= 1 and w & (w - 1) == 0 and w <= 8 and d >= 1 and split in (0, 1)
    empty = torch.empty(0, 0, dtype=torch.long)
    for bad in ((3, 1, 1, 1), (1, 3, 1, 1), (1, 2, 0, 1), (1, 2, 1, 2), (1, 2, 1, 0, 3)):  # last: 5 elements
        with pytest.raises(ValueError, match="RT, W, D, SPLIT"):
            triton_mma.launch(None, None, None, None, torch.zeros(1, 1, dtype=torch.long), 64, None, None, 1.0, False,
                              bad)
    triton_mma.launch(None, None, None, None, empty, 64, None, None, 1.0, False, (1, 1))  # empty index: no launch


@pytest.mark.cuda
@pytest.mark.parametrize("k,cfg", [(256, (1, 1, 1, 1)), (1024, (2, 2, 1, 1)), (4096, (1, 8, 1, 0))])
def test_cuda_mma_pdl_variants_in_a_graph(k, cfg, monkeypatch):
    """A plain launch, a programmatic dependent launch (PDL) and PDL with the early trigger give
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

    def run(flags, src):
        for f, val in flags.items():
            monkeypatch.setattr(triton_mma, f, val)
        logits = start[src].clone()
        triton_mma.launch(xs[src], w.packed, w.scale.view(torch.uint8), w.global_scale, idxs[src], k, logits,
                          vals[src], 0.5, True, cfg)
        return logits

    plain = run({"PDL": False, "TRIGGER": False}, 0)
    assert torch.equal(plain, run({"PDL": True, "TRIGGER": False}, 0))
    assert torch.equal(plain, run({"PDL": True, "TRIGGER": True}, 0))
    # ptxas -O1 (PTXAS_OPTIONS, the candidate that keeps the loads ahead): same sums, but ptxas may
    # fuse the epilogue's multiply-adds differently, so within one bf16 ulp
    torch.testing.assert_close(run({"PTXAS_OPTIONS": "-O1"}, 0).float(), plain.float(), rtol=2**-7, atol=0)
    monkeypatch.setattr(triton_mma, "PTXAS_OPTIONS", None)
    x, idx, val, logits = xs[0].clone(), idxs[0].clone(), vals[0].clone(), start[0].clone()
    monkeypatch.setattr(triton_mma, "PDL", True)
    monkeypatch.setattr(triton_mma, "TRIGGER", True)
    graph = torch.cuda.CUDAGraph()
    src = [t.clone() for t in (xs[0], idxs[0], vals[0], start[0])]  # graph inputs, overwritten before replay
    with torch.cuda.graph(graph):
        for dst, s in zip((x, idx, val, logits), src):
            dst.copy_(s)  # the kernels right before the gathered launch write every one of its inputs
        triton_mma.launch(x, w.packed, w.scale.view(torch.uint8), w.global_scale, idx, k, logits, val, 0.5, True, cfg)
        triton_mma.launch(x, w.packed, w.scale.view(torch.uint8), w.global_scale, idx, k, logits, val, 0.5, True, cfg)
    for s, new in zip(src, (xs[1], idxs[1], vals[1], start[1])):
        s.copy_(new)
    graph.replay()
    torch.cuda.synchronize()
    want = run({"PDL": False, "TRIGGER": False}, 1)
    want2 = want.clone()  # the second launch scatters onto the first's result
    triton_mma.launch(xs[1], w.packed, w.scale.view(torch.uint8), w.global_scale, idxs[1], k, want2, vals[1], 0.5,
                      True, cfg)
    assert torch.equal(logits, want2)


def test_trigger_rule(monkeypatch):
    """The early trigger: at K >= 2048 or under 2 MB of gathered rows (the measured rule);
    ``TRIGGER`` True / False overrides it."""
    assert triton_mma.use_trigger(1, 8, 256) and triton_mma.use_trigger(256, 32, 256)
    assert not triton_mma.use_trigger(256, 64, 256) and not triton_mma.use_trigger(64, 64, 1024)
    assert triton_mma.use_trigger(256, 8, 1024) and triton_mma.use_trigger(256, 64, 4096)
    monkeypatch.setattr(triton_mma, "TRIGGER", False)
    assert not triton_mma.use_trigger(1, 8, 256)
    monkeypatch.setattr(triton_mma, "TRIGGER", True)
    assert triton_mma.use_trigger(256, 64, 256)
