"""The vLLM plugin's environment variables: parsing and the errors that name them (no vLLM)."""
from __future__ import annotations

import pytest

from lowbit.integrations.vllm.config import parse


def test_off_by_default():
    for env in ({}, {"LOWBIT_VLLM": ""}, {"LOWBIT_VLLM": "0"}, {"LOWBIT_VLLM": "off"}):
        s = parse(env)
        assert not s.enabled and not s.draft and not s.markov, env


def test_parts():
    d = parse({"LOWBIT_VLLM": "Draft"})
    assert (d.draft, d.markov, d.mode) == (True, True, "draft")
    m = parse({"LOWBIT_VLLM": "markov"})
    assert (m.draft, m.markov) == (False, True)


def test_head_kwargs():
    s = parse({"LOWBIT_VLLM": "draft", "LOWBIT_VLLM_HEAD_MODE": "fast", "LOWBIT_VLLM_BITS": "4",
               "LOWBIT_VLLM_GROUP_SIZE": "32", "LOWBIT_VLLM_KCAND": "6", "LOWBIT_VLLM_RERANK": "40",
               "LOWBIT_VLLM_BOUND": "stat", "LOWBIT_VLLM_SIGMA": "3.5", "LOWBIT_VLLM_BLOCK": "64",
               "LOWBIT_VLLM_STATS": "/nonexistent-yet"})
    assert s.head_kwargs == dict(mode="fast", bits=4, group_size=32, kcand=6, rerank=40, bound="stat",
                                 sigma=3.5, block=64)
    assert s.stats_dir == "/nonexistent-yet"
    assert parse({"LOWBIT_VLLM": "draft"}).head_kwargs == {}  # DraftHead's own defaults
    assert parse({}).warmup_m == 64 and parse({"LOWBIT_VLLM_WARMUP_M": "0"}).warmup_m == 0
    assert parse({"LOWBIT_VLLM_BITS": "native"}).head_kwargs == {"bits": "native"}
    assert parse({"LOWBIT_VLLM_EAGER_GRAPHS": "1"}).head_kwargs == {"eager_graphs": True}
    assert parse({"LOWBIT_VLLM_EAGER_GRAPHS": "0"}).head_kwargs == {}


@pytest.mark.parametrize("name, value, needle", [
    ("LOWBIT_VLLM", "target", "target is not offered.*one of draft, markov"),
    ("LOWBIT_VLLM", "1", "one of draft, markov"),
    ("LOWBIT_VLLM_HEAD_MODE", "exact", "certified, fast"),
    ("LOWBIT_VLLM_BITS", "3", "auto, native, 2, 4, 8"),
    ("LOWBIT_VLLM_GROUP_SIZE", "48.0", "an integer"),
    ("LOWBIT_VLLM_GROUP_SIZE", "40", "multiple of 16"),
    ("LOWBIT_VLLM_GROUP_SIZE", "0", ">= 16"),
    ("LOWBIT_VLLM_BLOCK", "96", "power of two"),
    ("LOWBIT_VLLM_BLOCK", "512", r"in \[16, 256\]"),
    ("LOWBIT_VLLM_KCAND", "129", r"in \[1, 128\]"),
    ("LOWBIT_VLLM_RERANK", "0", ">= 1"),
    ("LOWBIT_VLLM_BOUND", "loose", "det, stat"),
    ("LOWBIT_VLLM_SIGMA", "nan", "positive and finite"),
    ("LOWBIT_VLLM_SIGMA", "-1", "positive and finite"),
    ("LOWBIT_VLLM_SIGMA", "four", "a number"),
    ("LOWBIT_VLLM_WARMUP_M", "-1", ">= 0"),
    ("LOWBIT_VLLM_EAGER_GRAPHS", "yes", "0, 1"),
])
def test_bad_value_names_the_variable(name, value, needle):
    with pytest.raises(ValueError, match=name) as e:
        parse({"LOWBIT_VLLM": "draft", name: value} if name != "LOWBIT_VLLM" else {name: value})
    assert e.match(needle)


def test_cross_checks(tmp_path):
    with pytest.raises(ValueError, match="LOWBIT_VLLM_KCAND.*in \\[1, 32\\]"):
        parse({"LOWBIT_VLLM_BLOCK": "32", "LOWBIT_VLLM_KCAND": "33"})
    with pytest.raises(ValueError, match="LOWBIT_VLLM_BOUND=stat needs an INTx"):
        parse({"LOWBIT_VLLM_BITS": "native", "LOWBIT_VLLM_BOUND": "stat"})
    f = tmp_path / "file"
    f.write_text("")
    with pytest.raises(ValueError, match="LOWBIT_VLLM_STATS must name a directory"):
        parse({"LOWBIT_VLLM_STATS": str(f)})
