"""lowbit's draft head inside a real vLLM (the CPU build), end to end.

vLLM's speculative decoding with the model drafting for itself (``method: "draft_model"``, the same
SmolLM2 folder, 3 tokens per draft, ``use_local_argmax_reduction: True`` so the drafter's greedy
token comes from ``LogitsProcessor.get_top_tokens``), greedy, float32, ``enforce_eager``, one
sequence at a time (the settings under which two vLLM runs give the same ids). It runs twice, each
in its own process with a timeout (:func:`lowbit.integrations.vllm.demo.compare`, the code behind
``lowbit demo --engine vllm``): as vLLM ships, and with ``LOWBIT_VLLM=draft``. One vLLM start per
configuration, shared by every test here.

Checked: the greedy ids are identical; lowbit's head answered the drafter (the plugin's call
counts, ``LOWBIT_VLLM_STATS``, docs/vllm.md) and vLLM's own head none of its calls; vLLM's
spec-decode counters give the same acceptance within 3 points; the plugin's INFO line is in vLLM's
log once per head built; without the variable the plugin does nothing. The acceptance numbers are
printed in the "vLLM numbers" summary.
"""
from __future__ import annotations

import io
import sys

import pytest

from lowbit.integrations.vllm import demo

NEW_TOKENS = 48
#: per vLLM run (start ~30-60 s on two cores, generation ~10 s)
TIMEOUT_S = 400
#: acceptance may differ by this much (a fraction) between the two drafter heads
ACCEPTANCE_TOL = 0.03


@pytest.fixture(scope="module")
def tokenizer(smollm2_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_dir)


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    return tmp_path_factory.mktemp("vllm-logs")


@pytest.fixture(scope="module")
def runs(smollm2_dir, tokenizer, logs, vllm_report):
    from lowbit.models.hf import prompt_ids

    ids = [prompt_ids(tokenizer, p) for p in demo.DEMO_PROMPTS]
    # ignore_eos: every prompt drafts for all NEW_TOKENS; TRITON_INTERPRET (tests/conftest.py sets it
    # without a GPU) is dropped: vLLM runs as a user runs it
    runs = demo.compare(smollm2_dir, ids, NEW_TOKENS, ignore_eos=True, timeout=TIMEOUT_S,
                        env={"TRITON_INTERPRET": None}, log_dir=logs)
    for row in demo.summary_rows(runs):
        vllm_report("; ".join(f"{k}: {v}" for k, v in row.items()))
    return runs


def test_greedy_ids_identical(runs):
    ref, got = runs["vllm"]["token_ids"], runs["lowbit"]["token_ids"]
    assert [len(t) for t in ref] == [NEW_TOKENS] * len(demo.DEMO_PROMPTS)
    assert got == ref


def test_lowbit_head_answers_the_drafter(runs):
    spec, lb = runs["lowbit"]["spec"], runs["lowbit"]["lowbit"]
    assert spec["draft_tokens"] > 0, spec
    counts = lb["counts"]
    assert counts["draft_calls"] > 0, lb
    # every draft token is one row of a drafter get_top_tokens call answered by lowbit
    assert counts["draft_rows"] >= spec["draft_tokens"], (counts, spec)
    assert counts["draft_vllm_calls"] == 0, lb
    assert lb["heads"] and all("DraftHead" in h for h in lb["heads"]), lb


def test_plugin_off_without_the_variable(runs, logs):
    lb = runs["vllm"]["lowbit"]
    assert not any(lb["counts"].values()), lb
    assert not lb["heads"], lb
    assert "lowbit:" not in (logs / "vllm.log").read_text(errors="replace")


def test_one_info_line_per_head_built(runs, logs):
    """The plugin says in vLLM's own log, once per head it builds, that lowbit's DraftHead runs."""
    lines = [line for line in (logs / "lowbit.log").read_text(errors="replace").splitlines()
             if "lowbit: DraftHead for the drafter" in line]
    assert len(lines) == len(runs["lowbit"]["lowbit"]["heads"]) >= 1, lines
    assert all(" INFO " in line and "mode=certified" in line for line in lines), lines


def test_acceptance_within_a_few_percent(runs):
    ours, theirs = runs["lowbit"]["spec"], runs["vllm"]["spec"]
    assert ours["drafts"] > 0 and theirs["drafts"] > 0, (ours, theirs)
    assert abs(demo.acceptance(ours) - demo.acceptance(theirs)) <= ACCEPTANCE_TOL, (ours, theirs)
    # the model drafts for itself in float32: vLLM's own drafter is accepted (almost) always
    assert demo.acceptance(theirs) >= 0.9, theirs


def test_demo_report(runs, tokenizer):
    from rich.console import Console

    out = io.StringIO()
    demo.print_report(runs, list(demo.DEMO_PROMPTS), tokenizer, Console(file=out, width=240))
    text = out.getvalue()
    for row in demo.summary_rows(runs):
        assert row["acceptance"] in text and row["lowbit head calls (rows)"] in text
    assert text.count("(identical ids)") == len(demo.DEMO_PROMPTS), text
    assert "lowbit head: DraftHead" in text, text


def test_demo_model_folder_as_given(smollm2_dir):
    assert demo.model_folder(smollm2_dir) == smollm2_dir


def test_demo_model_folder_refuses_an_existing_target(tmp_path):
    (tmp_path / "taken").mkdir()
    with pytest.raises(ValueError, match="exists already"):
        demo.model_folder(None, tmp_path / "taken")
    with pytest.raises(demo.VLLMDemoError, match="does not exist"):
        demo.model_folder(tmp_path / "nothing-here")


def test_demo_without_vllm_is_a_one_line_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # what find_spec sees where vLLM is not installed
    assert not demo.vllm_installed()
    with pytest.raises(demo.VLLMDemoError, match=r"needs vLLM, which is not installed.*setup_vllm\.sh") as e:
        demo.run_demo()
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("kw, match", [
    (dict(prompts=[], max_new_tokens=4), "prompts"),
    (dict(prompts=[[1, 2]], max_new_tokens=0), "max_new_tokens"),
    (dict(prompts=[[1, 2]], max_new_tokens=4, num_speculative_tokens=0), "num_speculative_tokens"),
    (dict(prompts=[[1, 2]], max_new_tokens=4, timeout=0), "timeout"),
])
def test_bad_arguments_refused_before_a_start(kw, match):
    with pytest.raises(ValueError, match=match):
        demo.run_engine_subprocess("unused", lowbit=False, **kw)
