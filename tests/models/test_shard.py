"""HF-style checkpoint of the tiny model and its tensor-parallel shards (DeepSeek converter rules).

Exactness: sharding only slices and concatenates tensors, and FP4 re-quantization of weights
that already are E2M1 x 2^e values is lossless, so merged shards must reproduce the model's
logits bit for bit. FP8 experts are a different format: compared by weight error instead.
"""
from __future__ import annotations

import dataclasses
import json
import os

import pytest
import torch
from safetensors.torch import load_file, save_file

from lowbit.models.tiny import TinyConfig, TinyModel, convert_hf_to_shards, load_hf, load_model, load_shards, save_hf
from lowbit.models.tiny.checkpoint import from_hf_name, to_hf_name
from lowbit.models.tiny.convert import shard_file, split_dim
from tests._helpers import rel_err


@pytest.fixture(scope="module")
def model():
    return TinyModel(TinyConfig(), seed=0)


@pytest.fixture(scope="module")
def tokens():
    return torch.randint(0, 1024, (2, 24), generator=torch.Generator().manual_seed(5))


@pytest.fixture(scope="module")
def hf_dir(model, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("hf"))
    save_hf(model, path)  # routed experts dequantized to bf16
    return path


def test_hf_names_round_trip(model):
    state = model.state_dict()
    hf = {to_hf_name(k, state): k for k in state}
    assert len(hf) == len(state)
    assert all(from_hf_name(h) == k for h, k in hf.items())
    for name in ("model.embed_tokens.weight", "lm_head.weight", "model.norm.weight",
                 "model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.q_proj.weight_scale_inv",
                 "model.layers.1.self_attn.o_proj.weight", "model.layers.0.self_attn.sinks",
                 "model.layers.0.self_attn.indexer.k_proj.weight", "model.layers.0.input_layernorm.weight",
                 "model.layers.0.post_attention_layernorm.weight", "model.layers.0.mlp.gate.weight",
                 "model.layers.0.mlp.gate.e_score_correction_bias", "model.layers.1.mlp.experts.3.down_proj.weight",
                 "model.layers.1.mlp.experts.3.down_proj.weight_scale", "model.layers.0.mlp.shared_experts.up_proj.weight",
                 "model.layers.0.hc_attn.scale", "model.layers.0.ngram_memory.table_packed", "model.hc_head_fn"):
        assert name in hf, name


def test_split_rules():
    assert split_dim("embed.weight") == 0 and split_dim("head.weight") == 0
    assert split_dim("layers.0.attn.wq.weight") == 0 and split_dim("layers.0.attn.wq.scale") == 0
    assert split_dim("layers.3.attn.attn_sink") == 0
    assert split_dim("layers.0.attn.wo.weight") == 1 and split_dim("layers.0.ffn.shared_experts.w2.scale") == 1
    assert split_dim("layers.0.ffn.shared_experts.w1.weight") == 0
    assert split_dim("layers.0.ffn.experts.2.w2.weight") == "expert"
    for name in ("layers.0.attn.wkv.weight", "layers.0.attn.indexer.wq.weight", "layers.0.ffn.gate.weight",
                 "layers.0.attn_norm.weight", "layers.0.hc_attn.fn", "layers.0.ngram.table_packed", "hc_head_fn"):
        assert split_dim(name) is None, name


def test_save_and_load_hf(model, hf_dir, tokens, tmp_path):
    tensors = load_file(os.path.join(hf_dir, "model.safetensors"))
    w = tensors["model.layers.0.mlp.experts.1.gate_proj.weight"]
    assert w.dtype == torch.bfloat16 and w.shape == (256, 256)
    assert "model.layers.0.mlp.experts.1.gate_proj.weight_scale" not in tensors
    assert torch.equal(w, model.layers[0].ffn.experts[1].w1.dequantized_weight(torch.bfloat16))
    assert tensors["model.layers.0.self_attn.q_proj.weight"].dtype == torch.float8_e4m3fn
    with open(os.path.join(hf_dir, "config.json")) as f:
        assert json.load(f)["expert_fmt"] == "bf16"
    # the FP4 checkpoint loads back into the very same model
    save_hf(model, str(tmp_path), experts_dtype="fp4")
    assert torch.equal(load_hf(str(tmp_path))(tokens), model(tokens))


@pytest.mark.parametrize("mp", [1, 2, 4])
def test_fp4_shards_merge_to_the_same_logits(model, hf_dir, tokens, tmp_path, mp):
    paths = convert_hf_to_shards(hf_dir, str(tmp_path), mp, experts_dtype="fp4")
    assert [os.path.basename(p) for p in paths] == [shard_file(i, mp) for i in range(mp)]
    assert [os.path.basename(p) for p in paths][0] == f"model0-mp{mp}.safetensors"
    shards = [load_file(p) for p in paths]
    cfg = model.cfg
    for i, shard in enumerate(shards):
        assert shard["layers.0.attn.wq.weight"].shape == (cfg.n_heads * cfg.head_dim // mp, cfg.dim)
        assert shard["layers.0.attn.wq.scale"].shape == (cfg.n_heads * cfg.head_dim // mp // 128, cfg.dim // 128)
        assert shard["layers.0.attn.wo.weight"].shape == (cfg.dim, cfg.n_heads * cfg.head_dim // mp)
        assert shard["layers.0.attn.attn_sink"].shape == (cfg.n_heads // mp,)
        assert shard["embed.weight"].shape == (cfg.vocab_size // mp, cfg.dim)
        assert shard["head.weight"].shape == (cfg.vocab_size // mp, cfg.dim)
        assert shard["layers.1.ffn.shared_experts.w2.weight"].shape == (cfg.dim, cfg.n_shared_experts * cfg.moe_inter_dim // mp)
        experts = sorted({int(k.split(".")[4]) for k in shard if ".ffn.experts." in k and k.startswith("layers.0.")})
        per = cfg.n_experts // mp
        assert experts == list(range(i * per, (i + 1) * per))
        assert shard["layers.0.ffn.experts.%d.w1.weight" % experts[0]].dtype == torch.uint8
        assert torch.equal(shard["layers.0.attn.wkv.weight"].view(torch.uint8), shards[0]["layers.0.attn.wkv.weight"].view(torch.uint8))
    state = model.state_dict()
    merged = load_shards(str(tmp_path), mp)
    assert set(merged) == set(state)
    for k, v in state.items():
        if ".ffn.experts." not in k:  # bytes identical: only sliced and concatenated
            assert torch.equal(merged[k].view(-1).view(torch.uint8), v.contiguous().view(-1).view(torch.uint8)), k
    loaded = load_model(str(tmp_path), mp)
    for (name, a), b in zip(loaded.named_modules(), model.modules()):
        if ".ffn.experts." in name and hasattr(a, "dequantized_weight"):
            # the same values; the codes may differ (a block whose max code is 3 re-quantizes with
            # half the scale and doubled codes: OCP's floor rule puts the max in [4, 8))
            assert torch.equal(a.dequantized_weight(), b.dequantized_weight()), name
    assert torch.equal(loaded(tokens), model(tokens))


def test_fp8_experts(model, hf_dir, tokens, tmp_path):
    convert_hf_to_shards(hf_dir, str(tmp_path / "mp2"), 2, experts_dtype="fp8")
    convert_hf_to_shards(hf_dir, str(tmp_path / "mp1"), 1, experts_dtype="fp8")
    m2, m1 = load_model(str(tmp_path / "mp2"), 2), load_model(str(tmp_path / "mp1"), 1)
    e = m2.layers[1].ffn.experts[2].w2
    assert m2.cfg.expert_fmt == "fp8" and e.weight.dtype == torch.float8_e4m3fn and e.scale.shape == (2, 2)
    # e4m3 with a block scale rounds each E2M1 x 2^e weight to 3 mantissa bits: <= 2^-4 relative
    want = model.layers[1].ffn.experts[2].w2.dequantized_weight()
    assert 0 < rel_err(e.dequantized_weight(), want) < 2.0**-4
    out = m2(tokens)
    assert torch.equal(out, m1(tokens))
    assert bool(torch.isfinite(out).all())


def test_experts_kept_as_stored(hf_dir, tokens, tmp_path):
    convert_hf_to_shards(hf_dir, str(tmp_path), 2)
    m = load_model(str(tmp_path), 2)
    assert m.cfg.expert_fmt == "bf16" and m.layers[0].ffn.experts[0].w1.weight.dtype == torch.bfloat16
    assert torch.equal(m(tokens), load_hf(hf_dir)(tokens))


def test_conversion_errors(hf_dir, tmp_path):
    with pytest.raises(ValueError, match="n_experts=4 is not divisible by mp=3"):
        convert_hf_to_shards(hf_dir, str(tmp_path), 3)
    with pytest.raises(ValueError, match="mp must be a positive int"):
        convert_hf_to_shards(hf_dir, str(tmp_path), 0)
    with pytest.raises(ValueError, match="experts_dtype"):
        convert_hf_to_shards(hf_dir, str(tmp_path), 1, experts_dtype="int4")
    # a shared expert of width 256 split 4 ways leaves 64 rows: not whole 128x128 scale blocks
    narrow = TinyModel(dataclasses.replace(TinyConfig(), n_layers=1, n_shared_experts=1), seed=0)
    save_hf(narrow, str(tmp_path / "narrow"))
    with pytest.raises(ValueError, match=r"shared_experts\.w[123]\.scale: .* gives 64, not a multiple of the 128"):
        convert_hf_to_shards(str(tmp_path / "narrow"), str(tmp_path / "out"), 4)
    assert not os.path.exists(tmp_path / "out")  # nothing written before the check


def test_load_shards_errors(hf_dir, tmp_path):
    convert_hf_to_shards(hf_dir, str(tmp_path), 2)
    with pytest.raises(ValueError, match="missing shard files"):
        load_shards(str(tmp_path), 4)
    f = os.path.join(str(tmp_path), shard_file(1, 2))
    shard = load_file(f)
    shard["layers.0.attn_norm.weight"] = shard["layers.0.attn_norm.weight"] + 1
    save_file(shard, f)
    with pytest.raises(ValueError, match="replicated tensor layers.0.attn_norm.weight differs"):
        load_shards(str(tmp_path), 2)
