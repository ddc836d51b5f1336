"""The vLLM drafter-head adapter (``lowbit.integrations.vllm.head``) without vLLM.

vLLM's objects are stood in for by the attributes the adapter reads: a ``LogitsProcessor``
(``soft_cap``, ``scale``) and a ``ParallelLMHead`` (``weight [V_pad, K]``, ``embedding_dim``,
``tp_size``, ``shard_indices``, ``weight_scale`` for FP8). Every tier: the reference on CPU, the
Triton kernels under the interpreter, and the GPU (``-m cuda``) incl. CUDA-graph capture.
"""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from lowbit.formats import FP8, NVFP4
from lowbit.integrations.vllm import stats
from lowbit.integrations.vllm.head import LazyDraftHead, unsupported, weight_ready
from lowbit.integrations.vllm.weights import lm_head_weight

V, V_PAD, K, M = 300, 320, 64, 3


def _lm_head(weight, v=V, **extra):
    shards = SimpleNamespace(num_org_elements=v, num_added_elements=0)
    return SimpleNamespace(weight=weight, embedding_dim=extra.pop("embedding_dim", weight.shape[1]), tp_size=1,
                           shard_indices=shards, bias=None, quant_method=None, **extra)


def _proc(**kw):
    return SimpleNamespace(soft_cap=kw.get("soft_cap"), scale=kw.get("scale", 1.0))


def _weights(device, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(V_PAD, K, generator=g) * 0.05
    w[V:] = 10.0  # padding rows that would win every argmax if they were read
    return w.to(device=device, dtype=dtype)


def _x(device, m=M, seed=1, dtype=torch.float32):
    return torch.randn(m, K, generator=torch.Generator().manual_seed(seed)).abs().to(device=device, dtype=dtype)


def _oracle(x, rows64):
    """fp64 argmax over the original vocabulary, ties to the lower index."""
    return (x.double().cpu() @ rows64.t()).argmax(-1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_dense_head_is_exact_and_skips_padding(backend, dtype):
    w = _weights(backend.device, dtype)
    lazy, x = LazyDraftHead({}), _x(backend.device, dtype=dtype)
    with backend.active():
        ids = lazy.argmax(_proc(), _lm_head(w), x)
    assert ids.dtype == torch.int64 and ids.shape == (M,)
    assert torch.equal(ids.cpu(), _oracle(x, w[:V].double().cpu()))
    assert lazy.head.n == V and lazy.head.bits == 8  # certified default: INT8 coarse copy of V rows
    counts = stats.snapshot()["counts"]
    assert (counts["draft_calls"], counts["draft_rows"], counts["draft_vllm_calls"]) == (1, M, 0)


@pytest.mark.parametrize("layout", ["rows", "transposed", "tensor_scale"])
def test_fp8_head_uses_native_rows(backend, layout):
    g = torch.Generator().manual_seed(2)
    q = FP8.quantize(torch.randn(V_PAD, K, generator=g) * 0.05, "row")
    data, scale = q.data.to(backend.device), q.scale.to(backend.device)
    if layout == "tensor_scale":
        scale = torch.tensor([0.01], device=backend.device)
    if layout == "transposed":  # vLLM keeps some FP8 heads as the [K, V_pad] view of the rows
        data = data.t()
    lm_head = _lm_head(data, weight_scale=scale, embedding_dim=K)
    weight, reason = lm_head_weight(lm_head)
    assert reason is None and isinstance(weight, FP8) and weight.data.shape == (V, K)
    x = _x(backend.device)
    lazy = LazyDraftHead({})
    with backend.active():
        ids = lazy.argmax(_proc(), lm_head, x)
    assert lazy.head.bits is None  # the weight's own rows are the coarse pass
    rows64 = weight.data.double().cpu() * weight.scale.double().cpu()
    assert torch.equal(ids.cpu(), _oracle(x, rows64))


class EmulationNvFp4LinearKernel:
    """Stands in for vLLM's NVFP4 kernel that keeps ModelOpt's linear layout (matched by name)."""


class CutlassNvFp4LinearKernel:
    """Stands in for a vLLM NVFP4 kernel that swizzles the scales."""


@pytest.mark.parametrize("holder", ["retained", "emulation"])
def test_nvfp4_head_uses_native_rows(backend, holder):
    q = NVFP4.quantize(_weights("cpu"))
    packed, scale = q.packed.to(backend.device), q.scale.to(backend.device)
    gs = q.global_scale.reshape(1).to(backend.device)
    if holder == "retained":  # the buffers vLLM keeps for a gather (as for DSpark's markov_w2)
        lm_head = _lm_head(packed, embedding_dim=K, _retain_weight_for_gather=True, is_w4a16_nvfp4=True,
                           _nvfp4_weight_for_gather=packed, _nvfp4_weight_scale_for_gather=scale,
                           _nvfp4_weight_global_scale_for_gather=gs, _nvfp4_group_size_for_gather=16)
    else:
        lm_head = _lm_head(packed, embedding_dim=K, weight_scale=scale.view(torch.uint8), weight_global_scale=gs)
        lm_head.quant_method = SimpleNamespace(kernel=EmulationNvFp4LinearKernel())
    weight, reason = lm_head_weight(lm_head)
    assert reason is None and isinstance(weight, NVFP4) and weight.shape == (V, K)
    assert weight.packed.data_ptr() == packed.data_ptr()  # no copy
    lazy, x = LazyDraftHead({}), _x(backend.device)
    with backend.active():
        ids = lazy.argmax(_proc(), lm_head, x)
    assert lazy.head.bits is None and "nvfp4 weight" in stats.snapshot()["heads"][0]
    assert torch.equal(ids.cpu(), _oracle(x, q.dequantize(torch.float64)[:V]))


def test_nvfp4_swizzled_head_refused():
    q = NVFP4.quantize(_weights("cpu"))
    lm_head = _lm_head(q.packed, embedding_dim=K, weight_scale=q.scale, weight_global_scale=q.global_scale)
    lm_head.quant_method = SimpleNamespace(kernel=CutlassNvFp4LinearKernel())
    weight, reason = lm_head_weight(lm_head)
    assert weight is None and "torch.uint8" in reason and "NVFP4 in the linear layout" in reason


def test_lazy_build_once_per_weight(backend):
    w = torch.zeros(V_PAD, K, device=backend.device)
    lm_head, lazy, x = _lm_head(w), LazyDraftHead({}, "drafter (test)"), _x(backend.device)
    with backend.active():
        assert lazy.argmax(_proc(), lm_head, x) is None  # zeros: not loaded yet
        assert lazy.argmax(_proc(), lm_head, x) is None
        w.copy_(_weights(backend.device))
        a = lazy.argmax(_proc(), lm_head, x)
        first = lazy.head
        b = lazy.argmax(_proc(), lm_head, x)
        assert lazy.head is first and torch.equal(a, b)
        w[:V].neg_()  # an in-place reload: a new head over the new values
        c = lazy.argmax(_proc(), lm_head, x)
    assert lazy.head is not first
    assert torch.equal(c.cpu(), _oracle(x, w[:V].double().cpu()))
    snap = stats.snapshot()
    assert len(snap["heads"]) == 2 and "drafter (test)" in snap["heads"][0] and "mode=certified" in snap["heads"][0]
    assert (snap["counts"]["draft_vllm_calls"], snap["counts"]["draft_calls"]) == (2, 3)


def test_weight_ready():
    w = torch.randn(20000, 16)  # more rows than one scan slice
    assert weight_ready(w)
    assert not weight_ready(torch.zeros(20000, 16))
    w[19999, 3] = float("inf")
    assert not weight_ready(w)
    w[19999, 3] = float("nan")
    assert not weight_ready(w)


@pytest.mark.parametrize("case, needle", [
    ("soft_cap", "soft-capping"), ("scale0", "not a positive number"), ("bias", "bias"),
    ("tp", "tensor-parallel"), ("added", "added (LoRA) vocabulary"),
])
def test_unsupported_reasons(case, needle):
    lm_head, proc, bias = _lm_head(_weights("cpu")), _proc(), None
    if case == "soft_cap":
        proc = _proc(soft_cap=30.0)
    elif case == "scale0":
        proc = _proc(scale=0.0)
    elif case == "bias":
        bias = torch.zeros(V_PAD)
    elif case == "tp":
        lm_head.tp_size = 2
    elif case == "added":
        lm_head.shard_indices.num_added_elements = 4
    assert unsupported(_proc(), _lm_head(_weights("cpu")), None) is None
    reason = unsupported(proc, lm_head, bias)
    assert reason is not None and needle in reason
    lazy = LazyDraftHead({})
    for _ in range(2):
        assert lazy.argmax(proc, lm_head, _x("cpu"), bias) is None
    snap = stats.snapshot()
    assert snap["fallbacks"] == [reason]  # logged once
    assert snap["counts"]["draft_vllm_calls"] == 2 and lazy.head is None


def test_positive_scale_is_answered():
    w, x = _weights("cpu"), _x("cpu")
    ids = LazyDraftHead({}).argmax(_proc(scale=0.125), _lm_head(w), x)
    assert torch.equal(ids, _oracle(x, w[:V].double()))


@pytest.mark.parametrize("weight, needle", [
    (torch.randint(0, 9, (V_PAD, K // 8), dtype=torch.int32), "int32"),
    (torch.zeros(V_PAD, K, dtype=torch.uint8), "uint8"),
])
def test_unreadable_weights_keep_vllm(weight, needle):
    lm_head = _lm_head(weight, embedding_dim=K)
    w, reason = lm_head_weight(lm_head)
    assert w is None and needle in reason
    assert LazyDraftHead({}).argmax(_proc(), lm_head, _x("cpu")) is None
    assert stats.snapshot()["fallbacks"] == [reason]


def test_fp8_scale_layouts_refused():
    q = FP8.quantize(torch.randn(V_PAD, K) * 0.05, "row")
    block = _lm_head(q.data, weight_scale=torch.ones(V_PAD // 64, K // 64), embedding_dim=K)
    assert "per-row" in lm_head_weight(block)[1]
    square = _lm_head(FP8.quantize(torch.randn(K, K), "row").data, weight_scale=torch.ones(K), embedding_dim=K)
    assert "cannot tell the rows" in lm_head_weight(square)[1]


def test_head_settings_and_refusal():
    w, x = _weights("cpu"), _x("cpu")
    lazy = LazyDraftHead({"mode": "fast", "bits": 4, "kcand": 8, "rerank": 16})
    lazy.argmax(_proc(), _lm_head(w), x)
    assert (lazy.head.mode, lazy.head.bits, lazy.head.rerank) == ("fast", 4, 16)
    # native coarse rows need an FP8 / NVFP4 head: DraftHead refuses, vLLM's path stays
    refused = LazyDraftHead({"bits": "native"})
    assert refused.argmax(_proc(), _lm_head(w), x) is None
    assert any("DraftHead refused" in r and "bits=None" in r for r in stats.snapshot()["fallbacks"])


@pytest.mark.cuda
def test_cuda_graph_capture_of_the_swapped_call():
    """The swapped drafter argmax, built eagerly, replays in a CUDA graph with fresh hidden
    states and gives the exact argmax (no host sync in the call: the weight key is host-only)."""
    w = _weights("cuda", torch.bfloat16)
    lm_head, proc, lazy = _lm_head(w), _proc(), LazyDraftHead({})
    x = _x("cuda", m=4, dtype=torch.bfloat16)
    lazy.argmax(proc, lm_head, x)  # eager: check + build + warmup (up to 64 rows)
    assert "warmed up to M=64" in stats.snapshot()["heads"][0]
    static_x = x.clone()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_ids = lazy.argmax(proc, lm_head, static_x)
    for seed in (5, 6):
        x2 = _x("cuda", m=4, seed=seed, dtype=torch.bfloat16) - 0.5
        static_x.copy_(x2)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(static_ids.cpu(), _oracle(x2, w[:V].double().cpu()))


def test_capturable():
    w = _weights("cpu")
    q = FP8.quantize(w, "row")
    fp8_head = _lm_head(q.data, weight_scale=q.scale)
    cases = [({}, _lm_head(w), True), ({"mode": "fast"}, fp8_head, True), ({}, fp8_head, False)]
    for kwargs, lm_head, want in cases:
        lazy = LazyDraftHead(kwargs)
        assert not lazy.capturable()  # nothing built yet
        lazy.argmax(_proc(), lm_head, _x("cpu"))
        assert lazy.capturable() is want, kwargs


@pytest.mark.cuda
def test_fp8_certified_not_captured():
    """The certified argmax over FP8 rows syncs once per call: inside a capture the call is left
    to vLLM (None, logged once); eager calls still answer."""
    q = FP8.quantize(_weights("cpu"), "row")
    lm_head = _lm_head(q.data.cuda(), weight_scale=q.scale.cuda())
    lazy, x = LazyDraftHead({}), _x("cuda")
    eager = lazy.argmax(_proc(), lm_head, x)
    assert eager is not None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        assert lazy.argmax(_proc(), lm_head, x) is None
    assert any("synchronizes once per call" in r for r in stats.snapshot()["fallbacks"])
    rows64 = q.data[:V].double() * q.scale[:V].double()
    assert torch.equal(lazy.argmax(_proc(), lm_head, x).cpu(), _oracle(x, rows64))


@pytest.mark.cuda
def test_no_build_during_capture():
    """A weight first seen inside a capture is neither checked nor built there (that would sync):
    the call returns None (vLLM's path) and the next eager call builds."""
    w = _weights("cuda")
    lm_head, lazy, x = _lm_head(w), LazyDraftHead({}), _x("cuda")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        assert lazy.argmax(_proc(), lm_head, x) is None
    assert lazy.head is None
    assert any("inside a CUDA-graph capture" in r for r in stats.snapshot()["fallbacks"])
    assert torch.equal(lazy.argmax(_proc(), lm_head, x).cpu(), _oracle(x, w[:V].double().cpu()))


# -- the top-k drafters' get_top_k_tokens ------------------------------------------------------------


def _dyadic(shape, denom, lim, seed):
    """Multiples of 1/denom in [-lim/denom, lim/denom]: every logit of K = 64 such products is exact
    in fp32 whatever the summation order, so fp64 is an exact oracle for values and ties."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-lim, lim + 1, shape, generator=g).double() / denom


def _topk_oracle(x, rows64, k):
    """Exact top-k of fp64 logits, descending, the lower index first among equal values."""
    logits = x.double().cpu() @ rows64.t()
    order = torch.sort(-logits, dim=-1, stable=True).indices[..., :k]
    return order, logits.gather(-1, order)


def _topk_head(device, dtype):
    w = _dyadic((V_PAD, K), 32, 8, seed=3)
    w[V:] = 10.0  # padding rows that would lead every top-k if they were read
    return w.to(device=device, dtype=dtype)


@pytest.mark.parametrize("dtype, scale, k, cap", [(torch.float32, 1.0, 4, None), (torch.float32, 0.5, 16, None),
                                                  (torch.bfloat16, 0.3, 16, None), (torch.float32, 0.5, 16, 0.25)],
                         ids=str)
def test_topk_ids_and_values(backend, dtype, scale, k, cap):
    """ids: the exact top-k (ties to the lower index: the dyadic logits tie often); values: the
    exact logits rounded to the model dtype, as fp32, times the scale, then soft-capped --
    vLLM's get_top_k_tokens, which also selects before capping."""
    w = _topk_head(backend.device, dtype)
    x = _dyadic((2, M, K), 8, 8, seed=4).to(device=backend.device, dtype=dtype)
    lazy = LazyDraftHead({})
    with backend.active():
        ids, values = lazy.topk(_proc(scale=scale, soft_cap=cap), _lm_head(w), x, k)
    want_ids, want64 = _topk_oracle(x, w[:V].double().cpu(), k)
    assert ids.dtype == torch.int64 and values.dtype == torch.float32 and ids.shape == values.shape == (2, M, k)
    assert torch.equal(ids.cpu(), want_ids)
    want = want64.to(dtype).float()
    if scale != 1.0:
        want = want * scale
    if cap is not None:
        assert (want.abs() > cap).any()  # the cap bends these values
        want = torch.tanh(want / cap) * cap
    assert torch.equal(values.cpu(), want)
    if dtype == torch.bfloat16:  # the rounding is exercised: not every exact logit is a bf16 value
        assert not torch.equal(want64.to(dtype).double(), want64)
    if k == 16:  # and ties inside the top-k (their order is the lower index first)
        assert (want64[..., 1:] == want64[..., :-1]).any()
    counts = stats.snapshot()["counts"]
    assert (counts["draft_topk_calls"], counts["draft_topk_rows"], counts["draft_topk_vllm_calls"]) == (1, 2 * M, 0)
    assert counts["draft_calls"] == counts["draft_vllm_calls"] == 0  # the argmax counts stay apart


def test_topk_values_in_the_head_dtype():
    """A processor whose head computes in fp32 (vLLM's ``head_dtype``) gets the exact fp32 values
    for bf16 hidden states, not bf16-rounded ones."""
    w = _topk_head("cpu", torch.bfloat16)
    x = _dyadic((M, K), 8, 8, seed=5).to(torch.bfloat16)
    proc = _proc()
    proc.head_dtype = torch.float32
    ids, values = LazyDraftHead({}).topk(proc, _lm_head(w), x, 8)
    want_ids, want64 = _topk_oracle(x, w[:V].double(), 8)
    assert torch.equal(ids, want_ids) and torch.equal(values, want64.float())
    assert not torch.equal(values, want64.to(torch.bfloat16).float())


@pytest.mark.parametrize("mode, k, needle", [
    ("certified", 0, "k must be a positive int"), ("certified", True, "k must be a positive int"),
    ("certified", 2.0, "k must be a positive int"), ("certified", 65, "k <= 64"),
    ("fast", 20, "top-k up to k=19 (fast mode)"),
])
def test_topk_bad_k_keeps_vllm(mode, k, needle):
    w, x = _weights("cpu"), _x("cpu")
    lazy = LazyDraftHead({"mode": mode, "kcand": 1, "block": 16} if mode == "fast" else {})
    assert lazy.topk(_proc(), _lm_head(w), x, k - 1 if mode == "fast" else 4) is not None  # the head answers
    for _ in range(2):
        assert lazy.topk(_proc(), _lm_head(w), x, k) is None
    snap = stats.snapshot()
    assert len(snap["fallbacks"]) == 1 and needle in snap["fallbacks"][0], snap["fallbacks"]
    assert (snap["counts"]["draft_topk_calls"], snap["counts"]["draft_topk_vllm_calls"]) == (1, 2)


def test_topk_log_probs_and_shared_refusals_keep_vllm():
    w, x = _weights("cpu"), _x("cpu")
    lazy = LazyDraftHead({})
    assert lazy.topk(_proc(), _lm_head(w), x, 4, log_probs=True) is None
    assert lazy.head is None  # refused before the weight is read
    assert lazy.argmax(_proc(soft_cap=30.0), _lm_head(w), x) is None  # argmax's refusals apply
    lm_head = _lm_head(w)
    lm_head.tp_size = 2
    assert lazy.topk(_proc(), lm_head, x, 4) is None
    assert lazy.topk(_proc(), _lm_head(w), x, 4, log_probs=True) is None
    snap = stats.snapshot()
    assert len(snap["fallbacks"]) == 3 and "log-partition" in snap["fallbacks"][0]
    assert "soft-capping" in snap["fallbacks"][1] and "tensor-parallel" in snap["fallbacks"][2]
    assert (snap["counts"]["draft_topk_vllm_calls"], snap["counts"]["draft_topk_calls"]) == (3, 0)


def test_topk_not_loaded_yet_then_built():
    w = torch.zeros(V_PAD, K)
    lm_head, lazy, x = _lm_head(w), LazyDraftHead({}), _x("cpu")
    assert lazy.topk(_proc(), lm_head, x, 4) is None  # zeros: the profile run, vLLM's path
    w.copy_(_weights("cpu"))
    ids, _ = lazy.topk(_proc(), lm_head, x, 4)
    assert torch.equal(ids, _topk_oracle(x, w[:V].double(), 4)[0])
    counts = stats.snapshot()["counts"]
    assert (counts["draft_topk_vllm_calls"], counts["draft_topk_calls"], counts["draft_topk_rows"]) == (1, 1, M)


def test_topk_capture_needs_an_eager_call_of_that_k(monkeypatch):
    """Inside a capture (simulated here; the real one is the cuda test below) a k this head has not
    answered eagerly keeps vLLM's path: nothing may be compiled there. An eager k is answered."""
    from lowbit.integrations.vllm import head as head_mod

    w, x = _weights("cpu"), _x("cpu")
    lazy = LazyDraftHead({})
    assert lazy.topk(_proc(), _lm_head(w), x, 4) is not None  # eager: builds, k = 4 seen
    monkeypatch.setattr(head_mod, "capturing", lambda device: True)
    assert lazy.topk(_proc(), _lm_head(w), x, 8) is None
    ids, _ = lazy.topk(_proc(), _lm_head(w), x, 4)
    assert torch.equal(ids, _topk_oracle(x, w[:V].double(), 4)[0])
    snap = stats.snapshot()
    assert len(snap["fallbacks"]) == 1 and "k=8 first called inside a CUDA-graph capture" in snap["fallbacks"][0]
    assert (snap["counts"]["draft_topk_calls"], snap["counts"]["draft_topk_vllm_calls"]) == (2, 1)
    monkeypatch.setattr(head_mod, "capturing", lambda device: False)
    w[:V].neg_()  # a reloaded weight: a new head, whose eager k start empty again
    assert lazy.topk(_proc(), _lm_head(w), x, 8) is not None
    monkeypatch.setattr(head_mod, "capturing", lambda device: True)
    assert lazy.topk(_proc(), _lm_head(w), x, 4) is None and lazy.topk(_proc(), _lm_head(w), x, 8) is not None


@pytest.mark.cuda
def test_topk_cuda_graph_capture():
    """An eager top-k call warms that k up; its capture then replays the exact top-k with fresh
    hidden states. A k first met inside a capture keeps vLLM's path there."""
    w = _topk_head("cuda", torch.bfloat16)
    lm_head, proc, lazy = _lm_head(w), _proc(), LazyDraftHead({})
    x = _dyadic((4, K), 8, 8, seed=6).to("cuda", torch.bfloat16)
    lazy.topk(proc, lm_head, x, 8)  # eager: check + build + warm-up of k = 8 up to 64 rows
    static_x = x.clone()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_ids, static_values = lazy.topk(proc, lm_head, static_x, 8)
        assert lazy.topk(proc, lm_head, static_x, 5) is None
    assert any("k=5 first called inside a CUDA-graph capture" in r for r in stats.snapshot()["fallbacks"])
    for seed in (7, 8):
        x2 = _dyadic((4, K), 8, 8, seed=seed).to("cuda", torch.bfloat16)
        static_x.copy_(x2)
        graph.replay()
        torch.cuda.synchronize()
        want_ids, want64 = _topk_oracle(x2, w[:V].double().cpu(), 8)
        assert torch.equal(static_ids.cpu(), want_ids)
        assert torch.equal(static_values.cpu(), want64.to(torch.bfloat16).float())


@pytest.mark.cuda
def test_topk_fp8_certified_not_captured():
    q = FP8.quantize(_weights("cpu"), "row")
    lm_head = _lm_head(q.data.cuda(), weight_scale=q.scale.cuda())
    lazy, x = LazyDraftHead({}), _x("cuda")
    assert lazy.topk(_proc(), lm_head, x, 4) is not None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        assert lazy.topk(_proc(), lm_head, x, 4) is None
    assert any("synchronizes once per call" in r for r in stats.snapshot()["fallbacks"])
