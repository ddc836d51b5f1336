"""The DSpark Markov-head adapter (``lowbit.integrations.vllm.markov``) without vLLM.

A ``DSparkMarkovHead`` is stood in for by what the adapter reads: ``markov_w2.weight`` (dense) or
the NVFP4 buffers vLLM retains for the gather. Results are checked against an fp64 oracle with a
derived bound on every tier; on the GPU the call is also captured in a CUDA graph and run with
CUDA's sync debug mode set to error (no host synchronization).
"""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from lowbit.formats import NVFP4
from lowbit.integrations.vllm import stats
from lowbit.integrations.vllm.markov import apply_bias_gathered, markov_weight

V, V_PAD, R = 300, 320, 48
U = {torch.float32: 2.0 ** -24, torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}


def _module(kind, device, dtype=torch.float32, seed=0):
    """(module, fp64 rows [V_PAD, R]) for a dense or NVFP4 ``markov_w2`` as vLLM holds it."""
    w = torch.randn(V_PAD, R, generator=torch.Generator().manual_seed(seed)) * 0.3
    if kind == "dense":
        w2 = SimpleNamespace(weight=w.to(device=device, dtype=dtype))
        return SimpleNamespace(markov_w2=w2), w2.weight.double().cpu()
    q = NVFP4.quantize(w)
    scale = q.scale.view(torch.uint8) if kind == "nvfp4_u8" else q.scale
    w2 = SimpleNamespace(weight=q.packed.to(device), _retain_weight_for_gather=True, is_w4a16_nvfp4=True,
                         _nvfp4_weight_for_gather=q.packed.to(device), _nvfp4_weight_scale_for_gather=scale.to(device),
                         _nvfp4_weight_global_scale_for_gather=q.global_scale.reshape(1).to(device),
                         _nvfp4_group_size_for_gather=16)
    return SimpleNamespace(markov_w2=w2), q.dequantize(torch.float64)


def _inputs(device, dtype, b, t, seed=1):
    g = torch.Generator().manual_seed(seed)
    embed = torch.randn(b, R, generator=g).to(device=device, dtype=dtype)
    values = (torch.randn(b, t, generator=g) * 4).to(device=device, dtype=dtype)
    index = torch.stack([torch.randperm(V, generator=g)[:t] for _ in range(b)]).to(device)
    logits = torch.full((b, V), float("-inf"), dtype=dtype, device=device)
    return embed, values, index, logits


def _check(out, embed, values, index, rows64, scale):
    """Written entries within the bound of fp32 math + one rounding; every other entry untouched."""
    out, embed, values, index = out.cpu(), embed.cpu(), values.cpu(), index.cpu()
    written = torch.zeros(out.shape, dtype=torch.bool).scatter_(1, index, True)
    assert torch.isneginf(out[~written]).all()
    prod = rows64[index] * embed.double().unsqueeze(1)
    exact = values.double() + scale * prod.sum(-1)
    tol = U[out.dtype] * exact.abs() + 2 * R * U[torch.float32] * abs(scale) * prod.abs().sum(-1)
    err = (out.gather(1, index).double() - exact).abs()
    assert (err <= tol).all(), err.max()


@pytest.mark.parametrize("kind", ["dense", "nvfp4", "nvfp4_u8"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_matches_oracle(backend, kind, dtype):
    m, rows64 = _module(kind, backend.device, dtype)
    embed, values, index, logits = _inputs(backend.device, dtype, 3, 7)
    with backend.active():
        out = apply_bias_gathered(m, embed, logits, values, index, -0.75)
    assert out is logits
    _check(out, embed, values, index, rows64, -0.75)
    assert stats.snapshot()["counts"]["markov_calls"] == 1


@pytest.mark.parametrize("kind", ["dense", "nvfp4"])
def test_dspark_strided_views(backend, kind):
    """DSpark passes one draft position of [B, n_spec, V] logits and [B, n_spec, k] candidates:
    strided views, written in place (the other positions untouched)."""
    m, rows64 = _module(kind, backend.device, torch.bfloat16)
    g = torch.Generator().manual_seed(4)
    base = torch.full((3, 4, V), float("-inf"), dtype=torch.bfloat16, device=backend.device)
    values = (torch.randn(3, 4, 6, generator=g) * 4).to(device=backend.device, dtype=torch.bfloat16)
    index = torch.stack([torch.stack([torch.randperm(V, generator=g)[:6] for _ in range(4)]) for _ in range(3)])
    index = index.to(backend.device)
    embed = torch.randn(3, R, generator=g).to(device=backend.device, dtype=torch.bfloat16)
    with backend.active():
        out = apply_bias_gathered(m, embed, base[:, 2], values[:, 2], index[:, 2], 0.5)
    assert out.data_ptr() == base[:, 2].data_ptr()
    _check(out, embed, values[:, 2], index[:, 2], rows64, 0.5)
    assert torch.isneginf(base[:, [0, 1, 3]]).all()


def test_dense_weight_of_another_dtype(backend):
    """vLLM's own method raises here (weight dtype != activation dtype); lowbit computes it."""
    m, rows64 = _module("dense", backend.device, torch.float32)
    embed, values, index, logits = _inputs(backend.device, torch.bfloat16, 2, 5)
    with backend.active():
        out = apply_bias_gathered(m, embed, logits, values, index, 1.0)
    _check(out, embed, values, index, rows64, 1.0)


def test_weight_view_is_cached_and_follows_reloads():
    m, _ = _module("nvfp4", "cpu")
    w, reason = markov_weight(m, V)
    assert reason is None and isinstance(w, NVFP4) and w.shape == (V, R)
    assert w.packed.data_ptr() == m.markov_w2._nvfp4_weight_for_gather.data_ptr()  # no copy
    assert markov_weight(m, V)[0] is w
    m.markov_w2._nvfp4_weight_for_gather.bitwise_xor_(0x11)  # an in-place reload
    assert markov_weight(m, V)[0] is not w
    assert markov_weight(m, V_PAD)[0].shape == (V_PAD, R)


@pytest.mark.parametrize("case, needle", [
    ("tensor_scale", "scale of type Tensor"),
    ("group32", "group size 32"),
    ("gscale_f16", "global scale"),
    ("int_weight", "markov_w2 weight torch.int32"),
    ("too_many_columns", "321 rows asked of an NVFP4 weight with 320"),
    ("int_values", "values torch.int64"),
])
def test_fallback_to_vllm_logged_once(case, needle):
    m, _ = _module("dense" if case in ("int_weight", "tensor_scale", "int_values") else "nvfp4", "cpu")
    embed, values, index, logits = _inputs("cpu", torch.float32, 2, 5)
    scale = 0.5
    if case == "tensor_scale":
        scale = torch.tensor(0.5)
    elif case == "group32":
        m.markov_w2._nvfp4_group_size_for_gather = 32
    elif case == "gscale_f16":
        m.markov_w2._nvfp4_weight_global_scale_for_gather = m.markov_w2._nvfp4_weight_global_scale_for_gather.half()
    elif case == "int_weight":
        m.markov_w2.weight = torch.zeros(V_PAD, R, dtype=torch.int32)
    elif case == "too_many_columns":
        logits = torch.full((2, V_PAD + 1), float("-inf"))
    elif case == "int_values":
        values = values.long()
    calls = []

    def vllm_method(*args):
        calls.append(args)
        return args[2]

    for _ in range(2):
        assert apply_bias_gathered(m, embed, logits, values, index, scale, fallback=vllm_method) is logits
    assert len(calls) == 2 and calls[0][0] is m and calls[0][5] is scale
    snap = stats.snapshot()
    assert len(snap["fallbacks"]) == 1 and needle in snap["fallbacks"][0], snap["fallbacks"]
    assert snap["counts"]["markov_vllm_calls"] == 2 and snap["counts"]["markov_calls"] == 0
    with pytest.raises(ValueError, match="lowbit cannot apply the Markov bias"):
        apply_bias_gathered(m, embed, logits, values, index, scale)


def test_inputs_not_mutated():
    m, _ = _module("nvfp4", "cpu")
    embed, values, index, logits = _inputs("cpu", torch.bfloat16, 2, 5)
    saved = [t.clone() for t in (embed, values, index, m.markov_w2._nvfp4_weight_for_gather)]
    apply_bias_gathered(m, embed, logits, values, index, 1.0)
    for before, after in zip(saved, (embed, values, index, m.markov_w2._nvfp4_weight_for_gather)):
        assert torch.equal(before, after)


@pytest.mark.cuda
@pytest.mark.parametrize("kind", ["dense", "nvfp4"])
def test_cuda_graph_capture_and_no_sync(kind):
    """vLLM's bf16 NVFP4 case: captured once, replayed with fresh embeddings / candidates; the eager
    call runs with CUDA's sync debug mode raising on any host synchronization."""
    m, rows64 = _module(kind, "cuda", torch.bfloat16)
    embed, values, index, logits = _inputs("cuda", torch.bfloat16, 4, 16)
    apply_bias_gathered(m, embed, logits.clone(), values, index, 0.5)  # compile / warm up
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        apply_bias_gathered(m, embed, logits.clone(), values, index, 0.5)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    static = [t.clone() for t in (embed, values, index, logits)]
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        apply_bias_gathered(m, static[0], static[3], static[1], static[2], 0.5)
    for seed in (2, 3):
        e2, v2, i2, l2 = _inputs("cuda", torch.bfloat16, 4, 16, seed)
        for dst, src in zip(static, (e2, v2, i2, l2)):
            dst.copy_(src)
        graph.replay()
        torch.cuda.synchronize()
        _check(static[3], e2, v2, i2, rows64, 0.5)
