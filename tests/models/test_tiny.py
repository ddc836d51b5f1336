"""The tiny DeepSeek-style model: its pieces, the kernels it drives, and the end-to-end self-test.

Tolerances: the self-test derives its own (``lowbit/models/tiny/verify.py``): twice the logit
error of a reference run whose every linear output carries the kernels' contract error (2^-8
relative). Structural properties (causality, hashing, routing, sharding) are exact.
"""
from __future__ import annotations

import dataclasses
import importlib

import pytest
import torch

from lowbit.formats.fp8 import FP8
from lowbit.models.tiny import TinyConfig, TinyModel, selftest
from lowbit.models.tiny.attention import Attention, Indexer
from lowbit.models.tiny.model import HyperConnection
from lowbit.models.tiny.verify import kernel_noise
from tests._helpers import rel_err

# a model small enough for the Triton interpreter: one block, one head, two experts
MICRO = TinyConfig(vocab_size=256, dim=128, n_layers=1, max_batch_size=3, max_seq_len=16, n_heads=1,
                   index_heads=1, n_experts=2, n_activated_experts=1, moe_inter_dim=128, n_shared_experts=1,
                   ngram_buckets=(61, 59), window=2, index_topk=2)


@pytest.fixture(scope="module")
def model():
    return TinyModel(TinyConfig(), seed=0)


def test_config_rejects_bad_shapes():
    with pytest.raises(ValueError, match="dim must be a multiple of 128"):
        TinyConfig(dim=200)
    with pytest.raises(ValueError, match="n_activated_experts"):
        TinyConfig(n_activated_experts=5)
    with pytest.raises(ValueError, match="ngram_orders"):
        TinyConfig(ngram_buckets=(2039,))
    with pytest.raises(ValueError, match="expert_fmt"):
        TinyConfig(expert_fmt="int4")
    cfg = TinyConfig(window=8)
    assert TinyConfig.from_dict(cfg.to_dict()) == cfg


def test_forward_validates_inputs(model):
    with pytest.raises(ValueError, match="max_seq_len"):
        model(torch.zeros(1, 8, dtype=torch.long), start_pos=125)
    with pytest.raises(ValueError, match="batch"):
        model(torch.zeros(5, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="tokens"):
        model(torch.zeros(1, 4))
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 1024\), got min 0, max 1024"):
        model(torch.tensor([[0, 1024]]))


def test_seeded_init_is_reproducible(model):
    tokens = torch.randint(0, 1024, (2, 20))
    again = TinyModel(TinyConfig(), seed=0)
    other = TinyModel(TinyConfig(), seed=1)
    a, b, c = model(tokens), again(tokens), other(tokens)
    assert a.shape == (2, 20, 1024) and a.dtype == torch.float32
    assert torch.equal(a, b)
    assert rel_err(c, a) > 0.5


def test_linears_use_the_configured_formats(model):
    blk = model.layers[0]
    assert blk.attn.wq.weight.dtype == torch.float8_e4m3fn and blk.attn.wq.scale.shape == (4, 2)
    assert blk.ffn.shared_experts.w2.weight.dtype == torch.float8_e4m3fn
    e = blk.ffn.experts[0].w1
    assert e.weight.dtype == torch.uint8 and e.weight.shape == (256, 128) and e.scale.shape == (256, 8)
    assert model.head.weight.dtype == torch.bfloat16


def test_model_drives_every_kernel(model, monkeypatch):
    """Each lowbit op the model is meant to exercise is called by one forward."""
    # the op packages themselves (``lowbit.ops.<name>`` attributes may be the functions)
    aq, f4, f8, ga, hs, sa = (importlib.import_module(f"lowbit.ops.{m}") for m in
                              ("act_quant", "fp4_gemm", "fp8_gemm", "gathered", "hc_sinkhorn", "sparse_attn"))

    calls: dict[str, int] = {}
    for mod, name in ((aq, "act_quant"), (f8, "fp8_gemm"), (f4, "fp4_gemm"), (sa, "sparse_attn"),
                      (hs, "hc_split_sinkhorn"), (ga, "gathered_rows")):
        real = getattr(mod, name)

        def spy(*args, _real=real, _name=name, **kwargs):
            calls[_name] = calls.get(_name, 0) + 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(mod, name, spy)
    inplace = []
    real_aq = aq.act_quant
    monkeypatch.setattr(aq, "act_quant", lambda *a, **k: (inplace.append(k.get("inplace", False)), real_aq(*a, **k))[1])
    model(torch.randint(0, 1024, (1, 24)))
    assert set(calls) == {"act_quant", "fp8_gemm", "fp4_gemm", "sparse_attn", "hc_split_sinkhorn", "gathered_rows"}, calls
    assert calls["hc_split_sinkhorn"] == 2 * model.cfg.n_layers
    assert any(inplace), "the KV cache must go through act_quant(inplace=True)"


def _attention_positions(model, tokens, monkeypatch):
    """The topk_idxs every Attention passed to sparse_attn during one forward."""
    got = []
    real = Attention.positions

    def record(self, *args, **kwargs):
        got.append(real(self, *args, **kwargs))
        return got[-1]

    monkeypatch.setattr(Attention, "positions", record)
    model(tokens)
    return got


def test_attention_positions_are_causal_window_plus_topk(model, monkeypatch):
    cfg = model.cfg
    s = 48
    idx = _attention_positions(model, torch.randint(0, 1024, (2, s)), monkeypatch)[-1]  # last block
    assert idx.shape == (2, s, cfg.window + cfg.index_topk) and idx.dtype == torch.int32
    idx = idx.long()
    t = torch.arange(s)[None, :, None]
    win, top = idx[..., : cfg.window], idx[..., cfg.window:]
    expect = t - torch.arange(cfg.window - 1, -1, -1)
    assert torch.equal(win, torch.where(expect >= 0, expect, -1).expand_as(win))
    valid = top >= 0
    assert bool((top[valid].view(-1) >= 0).all())
    assert bool((top <= t - cfg.window)[valid].all()), "indexer picked a position inside the window or the future"
    n_cand = (t - cfg.window + 1).clamp(0, cfg.index_topk).squeeze(-1)
    assert torch.equal(valid.sum(-1), n_cand.expand(2, s)), "every candidate slot is used once enough positions exist"
    for row in top.view(-1, cfg.index_topk):
        v = row[row >= 0]
        assert v.unique().numel() == v.numel()


def test_indexer_ranks_by_relu_weighted_fp8_scores(model):
    """Recompute the indexer's top-k from its own FP8 caches for the last query."""
    cfg = model.cfg
    ind: Indexer = model.layers[0].attn.indexer
    s = 40
    tokens = torch.randint(0, 1024, (1, s))
    seen = {}
    h = ind.register_forward_hook(lambda m, i, o: seen.update(x=i[0], out=o))
    try:
        model(tokens)
    finally:
        h.remove()
    x, out = seen["x"], seen["out"]
    from lowbit.ops import act_quant
    from lowbit.models.tiny.layers import apply_rope

    q = apply_rope(ind.wq(x).view(1, s, ind.n_heads, ind.head_dim), model.rope_cos[:s], model.rope_sin[:s], ind.rope_dim)
    q8, qs = act_quant(q.contiguous(), ind.head_dim)
    k = ind.k_cache[:1, :s].double() * ind.k_scale[:1, :s].double()
    w = ind.weights_proj(x).double() * (ind.n_heads * ind.head_dim) ** -0.5
    score = (torch.relu(torch.einsum("bshd,btd->bsht", q8.double() * qs.double(), k)) * w[..., None]).sum(2)[0, -1]
    cand = score[: s - cfg.window]
    want = torch.topk(cand, cfg.index_topk).indices.sort().values
    assert torch.equal(out[0, -1].sort().values, want)


def test_kv_cache_holds_fp8_values(model):
    cfg = model.cfg
    model(torch.randint(0, 1024, (2, 30)))
    attn = model.layers[1].attn
    nope = cfg.head_dim - cfg.rope_dim
    cached = attn.kv_cache[:2, :30, :nope]
    # a row already on the FP8 grid survives another quantize-dequantize almost unchanged
    # (~1e-4 here, one fp32 rounding of the scale); a bf16 row loses ~2e-2
    again = FP8.quantize(cached, "group", cfg.kv_block).dequantize(torch.bfloat16)
    assert rel_err(again, cached) < 2e-3
    rope_part = attn.kv_cache[:2, :30, nope:]
    assert rel_err(FP8.quantize(rope_part, "group", 64).dequantize(torch.bfloat16), rope_part) > 5e-3


def test_ngram_buckets(model):
    mem = model.layers[0].ngram
    cfg = model.cfg
    hist = torch.randint(0, 1024, (2, 30))
    hist[:, 20:23] = hist[:, 5:8]  # the same 3-gram at positions 7 and 22
    rows = mem.bucket_ids(hist, 0, 30)
    assert rows.shape == (2, 30, len(cfg.ngram_orders)) and rows.dtype == torch.int64
    lo = torch.tensor([0, cfg.ngram_buckets[0]])
    assert bool(((rows >= lo) & (rows < lo + torch.tensor(cfg.ngram_buckets))).all())
    assert torch.equal(rows[:, 7], rows[:, 22])  # both orders see identical last-n ids
    assert torch.equal(mem.bucket_ids(hist, 12, 30), rows[:, 12:])  # decode slices agree with prefill
    # position 0 has no history: its 2-gram differs from a context that has a real previous token
    hist2 = hist.clone()
    hist2[:, 1] = hist[:, 0]
    assert not torch.equal(mem.bucket_ids(hist2, 1, 2)[:, 0, 0], rows[:, 0, 0])


def test_moe_matches_a_dense_loop(model):
    moe = model.layers[0].ffn
    x = torch.randn(2, 5, model.cfg.dim).bfloat16()
    with torch.inference_mode():
        out = moe(x)
        weights, idx = moe.gate(x.view(-1, model.cfg.dim))
        assert torch.allclose(weights.sum(-1), torch.full((10,), model.cfg.route_scale))
        assert bool((idx[:, 0] != idx[:, 1]).all())
        want = moe.shared_experts(x.view(-1, model.cfg.dim)).float()
        for tok in range(10):
            for j in range(2):
                e = moe.experts[int(idx[tok, j])]
                want[tok] += e(x.view(-1, model.cfg.dim)[tok : tok + 1]).float()[0] * weights[tok, j]
    assert rel_err(out.view(10, -1), want.bfloat16()) < 1e-2


def test_hyper_connection_post_and_pre():
    cfg = TinyConfig()
    hc = HyperConnection(cfg, torch.Generator().manual_seed(0))
    res = torch.randn(2, 3, cfg.hc_mult, cfg.dim).bfloat16()
    y = torch.randn(2, 3, cfg.dim).bfloat16()
    eye = torch.eye(cfg.hc_mult).expand(2, 3, -1, -1)
    zeros = torch.zeros(2, 3, cfg.hc_mult)
    assert torch.equal(HyperConnection.post(y, res, zeros, eye), res)
    out = HyperConnection.post(y, res, torch.ones(2, 3, cfg.hc_mult), eye)
    assert torch.allclose(out.float(), (res.float() + y.float().unsqueeze(2)).bfloat16().float())
    same = torch.randn(2, 3, 1, cfg.dim).expand(-1, -1, cfg.hc_mult, -1).bfloat16()
    h, post, comb = hc.pre(same)
    assert h.shape == (2, 3, cfg.dim) and post.shape == (2, 3, cfg.hc_mult) and comb.shape == (2, 3, 4, 4)
    # comb is (nearly) doubly stochastic, so mixing identical streams keeps them identical
    assert torch.allclose(comb.sum(-2), torch.ones(2, 3, 4), atol=1e-4)


def test_selftest_reference_cpu():
    """The CI self-test: prefill + 22 decode steps on the reference path (~10 s on 2 cores)."""
    result = selftest(device="cpu", steps=22, verbose=False)
    assert result["ok"], result
    assert result["path"] == "reference"
    assert 1e-3 < result["noise_floor"] < 0.1  # the derived tolerance is neither vacuous nor zero
    assert result["checks"]["decode_vs_prefill"]["value"] < result["checks"]["decode_vs_prefill"]["tol"]
    assert result["checks"]["finite"]["value"] == 0
    assert result["positions"] == 64


def test_kernel_noise_is_seeded_and_scaled(model):
    tokens = torch.randint(0, 1024, (1, 12))
    clean = model(tokens)
    with kernel_noise(model, rel=0.0):
        assert torch.equal(model(tokens), clean)
    with kernel_noise(model, seed=3):
        a = model(tokens)
    with kernel_noise(model, seed=3):
        b = model(tokens)
    with kernel_noise(model, rel=2.0**-5, seed=3):
        c = model(tokens)
    assert torch.equal(a, b)
    assert 0 < rel_err(a, clean) < rel_err(c, clean)


def test_selftest_catches_a_broken_decode(monkeypatch):
    """A decode path that forgets the cached history (the n-gram hash restarts at every call)
    must fail decode_vs_prefill: the check has teeth."""
    from lowbit.models.tiny.ngram import NgramMemory

    real = NgramMemory.bucket_ids
    monkeypatch.setattr(NgramMemory, "bucket_ids", lambda self, hist, start, end: real(self, hist[:, start:end], 0, end - start))
    result = selftest(device="cpu", steps=4, verbose=False, config=dataclasses.replace(TinyConfig(), n_layers=1))
    assert not result["ok"]
    assert not result["checks"]["decode_vs_prefill"]["ok"]
    assert result["checks"]["prompt_vs_prefill"]["ok"]


def test_selftest_reports_nan(monkeypatch):
    from lowbit.models.tiny.moe import MoE

    real = MoE.forward
    monkeypatch.setattr(MoE, "forward", lambda self, x: real(self, x) * float("nan"))
    result = selftest(device="cpu", steps=2, prompt_len=8, verbose=False, config=dataclasses.replace(TinyConfig(), n_layers=1))
    assert not result["checks"]["finite"]["ok"]
    assert any(name.endswith("ffn") for name in result["nonfinite_modules"])


@pytest.mark.interpret
def test_selftest_interpreter_micro():
    """The Triton kernels (interpreted on CPU) against the reference path, on a one-block model."""
    result = selftest(device="cpu", steps=2, prompt_len=4, batch=2, verbose=False, config=MICRO, backend="triton")
    assert result["path"] == "triton"
    assert result["ok"], result


@pytest.mark.cuda
def test_selftest_cuda():
    result = selftest(device="cuda", verbose=True)
    assert result["path"] == "triton"
    assert "triton_vs_reference" in result["checks"]
    assert result["ok"], result
