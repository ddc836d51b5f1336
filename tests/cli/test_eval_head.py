"""lowbit eval-head and lowbit.models.eval_head.evaluate_head."""
from __future__ import annotations

import json
import math

import pytest
import torch

from lowbit.cli import main
from lowbit.models import eval_head
from tests.cli._tiny import needs_matplotlib


class _FakeHead:
    """Answers from precomputed logits with a known number of wrong argmaxes."""

    def __init__(self, weight, cfg, wrong_every=4):
        self.weight, self.wrong_every = weight, wrong_every
        self.packing = type("P", (), {"nbytes": 1234})()
        self.stats = {"mean_set_size": 3.0, "max_set_size": 7, "fallback_rate": 0.25}

    def reset_stats(self):
        pass

    def argmax(self, x):
        best = (x.float() @ self.weight.float().t()).argmax(-1)
        # every wrong_every-th row (by its first feature's sign trick) gets a wrong answer
        wrong = torch.arange(x.shape[0]) % self.wrong_every == 0
        return torch.where(wrong, (best + 1) % self.weight.shape[0], best)

    def topk(self, x, k):
        v, i = (x.float() @ self.weight.float().t()).topk(k, dim=-1)
        i = i.clone()
        i[:, -1] = -1  # the last of each top-k is always wrong
        return v, i


def test_parse_config_round_trip_and_errors():
    cfg = eval_head.parse_config("fast:int4:g64:k8:r32")
    assert cfg == {"mode": "fast", "bits": 4, "group_size": 64, "kcand": 8, "rerank": 32}
    assert eval_head.config_label(cfg) == "fast:int4:g64:k8:r32"
    assert eval_head.parse_config("certified:int4:g32:stat4") == {"mode": "certified", "bits": 4, "group_size": 32, "bound": "stat", "sigma": 4.0}
    for bad in ("turbo:int4", "fast:int3", "fast:q4", "fast:g6.5"):
        with pytest.raises(ValueError):
            eval_head.parse_config(bad)


def test_metrics_with_a_fake_head():
    torch.manual_seed(1)
    w = torch.randn(300, 32)
    h = torch.randn(64, 32)
    rows = eval_head.evaluate_head(h, w, [{"mode": "certified", "bits": 8}], batch=16,
                                   head_factory=lambda w_, c: _FakeHead(w_, c))
    r = rows[0]
    # rows 0, 4, 8, ... of each batch of 16 are wrong: 4 of 16
    assert r["agreement"] == pytest.approx(12 / 16)
    assert r["recall@1"] == pytest.approx(12 / 16)
    assert r["recall@4"] == pytest.approx(3 / 4)
    assert r["recall@16"] == pytest.approx(15 / 16)
    assert r["mean_set_size"] == 3.0 and r["max_set_size"] == 7 and r["fallback_rate"] == 0.25
    assert r["bytes"] == 1234 and r["bf16_bytes"] == 300 * 32 * 2 and r["positions"] == 64


def test_real_draft_head_certified_is_exact_and_fast_int2_is_not():
    torch.manual_seed(0)
    w = torch.randn(1000, 256) * 0.05  # K = 256: INT2 pads K to a multiple of 4 * 64, so no padding here
    h = torch.randn(128, 256)
    rows = eval_head.evaluate_head(h, w, ["certified:int8:g64", "fast:int2:g64:k1:r1"])
    cert, coarse = rows
    assert cert["agreement"] == 1.0 and cert["recall@4"] == 1.0 and cert["recall@16"] == 1.0
    assert cert["mean_set_size"] >= 1 and 0 <= cert["fallback_rate"] <= 1
    assert coarse["agreement"] < 1.0  # 2-bit coarse argmax alone misses on random heads
    assert math.isnan(coarse["mean_set_size"])
    assert math.isnan(coarse["recall@16"])  # kcand=1 over 8 blocks of 128 cannot give 16 candidates
    assert coarse["bytes"] < cert["bytes"] < w.numel() * 2 * 1.1


def test_evaluate_head_validates():
    with pytest.raises(ValueError, match="K dims differ"):
        eval_head.evaluate_head(torch.randn(4, 32), torch.randn(100, 64), ["fast:int4"])
    with pytest.raises(ValueError, match="unknown keys"):
        eval_head.evaluate_head(torch.randn(4, 64), torch.randn(100, 64), [{"mode": "fast", "colour": 1}])


@needs_matplotlib
def test_cli_eval_head_from_saved_hidden(tmp_path, capsys):
    torch.manual_seed(0)
    w = torch.randn(512, 64) * 0.05
    h = torch.randn(200, 64)
    torch.save({"hidden": h, "weight": w, "model": "random"}, tmp_path / "h.pt")
    out = tmp_path / "out"
    rc = main(["eval-head", "--hidden", str(tmp_path / "h.pt"), "--configs", "fast:int4:g64:k8:r32,certified:int8:g64",
               "--out", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "fast:int4:g64:k8:r32" in text and "certified:int8:g64" in text
    body = json.loads((out / "eval_head.json").read_text())
    assert body["positions"] == 200 and len(body["rows"]) == 2
    assert body["rows"][1]["agreement"] == 1.0
    # the certified head's fallbacks per top-k pass, in the JSON and as table columns
    assert 0 <= body["rows"][1]["fallback_rate@16"] <= 1 and "fallback_rate@16" not in body["rows"][0]
    assert "top16" in text
    assert (out / "eval_head.csv").read_text().splitlines()[0].startswith("label,")
    assert (out / "eval_head.png").read_bytes()[:4] == b"\x89PNG"


@needs_matplotlib
def test_cli_eval_head_tiny_model(tiny_model, tmp_path, capsys):
    out = tmp_path / "out"
    rc = main(["eval-head", "--model", tiny_model, "--positions", "400", "--configs", "certified:int8:g64",
               "--out", str(out), "--no-cache", "--save-hidden", str(tmp_path / "h.pt")])
    assert rc == 0, capsys.readouterr().err
    body = json.loads((out / "eval_head.json").read_text())
    assert body["positions"] == 400 and body["vocab"] == 320 and body["rows"][0]["agreement"] == 1.0
    saved = torch.load(tmp_path / "h.pt")
    assert saved["hidden"].shape == (400, 64)


@needs_matplotlib
def test_cli_eval_head_needs_the_models_continuations(tiny_model, tmp_path, capsys, monkeypatch):
    from lowbit.models import data

    # a short sample so most positions must come from the model's own greedy continuations
    monkeypatch.setattr(data, "TEXTS", ("A short text. It has two sentences.",))
    monkeypatch.setattr(data, "PROMPTS", ("Say something.", "Count to five."))
    rc = main(["eval-head", "--model", tiny_model, "--positions", "300", "--configs", "fast:int4:g64:k8:r32",
               "--out", str(tmp_path / "out"), "--no-cache", "--save-hidden", str(tmp_path / "h.pt")])
    out = capsys.readouterr().out
    assert rc == 0 and "continuations" in out
    assert torch.load(tmp_path / "h.pt")["hidden"].shape == (300, 64)


def test_cli_eval_head_bad_arguments(tmp_path, capsys):
    assert main(["eval-head", "--configs", "fast:int3", "--hidden", "x"]) == 2
    assert "lowbit: error: --configs" in capsys.readouterr().err
    assert main(["eval-head", "--hidden", str(tmp_path / "nope.pt")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["eval-head", "--model", str(tmp_path / "nothing"), "--positions", "10"]) == 2
    assert "does not exist" in capsys.readouterr().err
