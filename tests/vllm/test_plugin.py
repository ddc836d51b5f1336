"""The vLLM plugin's logic against real vLLM classes, without starting an engine.

Covers: the entry point, enabled / disabled, environment-variable validation, only the drafter's
``LogitsProcessor`` answering through lowbit, the lazy build after the weights change, fallbacks
logged once, and the call counts file. Global registrations made here are undone per test.
"""
from __future__ import annotations

import logging
from importlib.metadata import entry_points

import pytest
import torch

pytest.importorskip("vllm")

from vllm.compilation.backends import set_model_tag  # noqa: E402
from vllm.config import VllmConfig, set_current_vllm_config  # noqa: E402
from vllm.model_executor.custom_op import op_registry_oot  # noqa: E402
from vllm.model_executor.layers.logits_processor import LogitsProcessor  # noqa: E402
from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead  # noqa: E402
from vllm.model_executor.models.qwen3_dspark import DSparkMarkovHead  # noqa: E402

import lowbit.integrations.vllm as plugin  # noqa: E402
from lowbit.integrations.vllm import config, stats  # noqa: E402
from lowbit.integrations.vllm.logits import LowbitLogitsProcessor  # noqa: E402

V, K = 1000, 64  # vLLM pads the head to 1024 rows


@pytest.fixture
def env(monkeypatch, tmp_path):
    """Set plugin variables for one test; the registries, settings and counters are restored."""
    for name in ("LOWBIT_VLLM", "LOWBIT_VLLM_STATS", "LOWBIT_VLLM_HEAD_MODE", "LOWBIT_VLLM_BITS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(DSparkMarkovHead, "apply_bias_gathered", DSparkMarkovHead.apply_bias_gathered)
    saved = dict(op_registry_oot)
    config.reset()
    stats.reset()

    def set_env(**values):
        for k, v in values.items():
            monkeypatch.setenv(k, v)
        config.reset()

    yield set_env
    op_registry_oot.clear()
    op_registry_oot.update(saved)
    config.reset()
    stats.reset()


@pytest.fixture
def lowbit_log():
    """Records of the plugin's logger (a child of vLLM's, which does not propagate to the root)."""
    records = []
    handler = logging.Handler(level=logging.DEBUG)
    handler.emit = records.append
    log = logging.getLogger("vllm.lowbit")
    old = log.level
    log.setLevel(logging.INFO)
    log.addHandler(handler)
    yield records
    log.removeHandler(handler)
    log.setLevel(old)


def _processor(tag=None, **kw):
    with set_current_vllm_config(VllmConfig()):
        if tag is None:
            return LogitsProcessor(V, **kw)
        with set_model_tag(tag):
            return LogitsProcessor(V, **kw)


def _head(weight=None, seed=0):
    with set_current_vllm_config(VllmConfig()):
        head = ParallelLMHead(V, K, disable_tp=True)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        head.weight.copy_(torch.randn(head.weight.shape, generator=g) if weight is None else weight)
    head.quant_method.process_weights_after_loading(head)  # vLLM CPU's GEMM dispatch (may pack a copy)
    return head


def _x(m=5, seed=1):
    return torch.randn(m, K, generator=torch.Generator().manual_seed(seed))


def _oracle(head, x):
    return (x.double() @ head.weight[:V].double().t()).argmax(-1)


def test_entry_point_names_register():
    eps = {ep.name: ep for ep in entry_points(group="vllm.general_plugins")}
    assert "lowbit" in eps, f"no lowbit entry point in vllm.general_plugins: {sorted(eps)}"
    assert eps["lowbit"].load() is plugin.register


def test_disabled_registers_nothing(env):
    original = DSparkMarkovHead.apply_bias_gathered
    plugin.register()
    assert "LogitsProcessor" not in op_registry_oot
    assert DSparkMarkovHead.apply_bias_gathered is original
    assert type(_processor("draft_model")) is LogitsProcessor


def test_draft_registers_processor_and_markov(env):
    env(LOWBIT_VLLM="draft")
    original = DSparkMarkovHead.apply_bias_gathered
    plugin.register()
    plugin.register()  # loaded again in the same process: no duplicate registration
    assert op_registry_oot["LogitsProcessor"] is LowbitLogitsProcessor
    assert DSparkMarkovHead.apply_bias_gathered is not original
    assert DSparkMarkovHead.apply_bias_gathered.vllm_original is original


def test_markov_only_leaves_processor(env):
    env(LOWBIT_VLLM="markov")
    plugin.register()
    assert "LogitsProcessor" not in op_registry_oot
    assert getattr(DSparkMarkovHead.apply_bias_gathered, "_lowbit", False)


@pytest.mark.parametrize("name, value, needle", [
    ("LOWBIT_VLLM", "target", "LOWBIT_VLLM must be one of"),
    ("LOWBIT_VLLM_HEAD_MODE", "exact", "LOWBIT_VLLM_HEAD_MODE"),
    ("LOWBIT_VLLM_BITS", "3", "LOWBIT_VLLM_BITS"),
])
def test_bad_variable_stops_register(env, name, value, needle):
    env(**{"LOWBIT_VLLM": "draft", name: value})
    with pytest.raises(ValueError, match=needle):
        plugin.register()
    assert "LogitsProcessor" not in op_registry_oot


def test_only_the_drafter_answers_through_lowbit(env):
    env(LOWBIT_VLLM="draft")
    plugin.register()
    target, drafter = _processor(), _processor("draft_model")
    assert isinstance(target, LowbitLogitsProcessor) and target.lowbit_head is None
    assert drafter.lowbit_head is not None
    head, x = _head(), _x()
    ids = drafter.get_top_tokens(head, x)
    assert torch.equal(ids, _oracle(head, x))
    assert torch.equal(target.get_top_tokens(head, x), ids)  # vLLM's own path, same answer here
    counts = stats.snapshot()["counts"]
    assert (counts["draft_calls"], counts["draft_rows"]) == (1, x.shape[0])
    assert torch.equal(drafter(head, x), target(head, x))  # full logits stay vLLM's


def test_lazy_build_after_weights_change(env, lowbit_log):
    env(LOWBIT_VLLM="draft")
    plugin.register()
    drafter = _processor("eagle_head")
    head, x = _head(torch.zeros(1024, K)), _x()
    first = drafter.get_top_tokens(head, x)  # the profile run: zero weights, vLLM's path
    assert drafter.lowbit_head.head is None
    assert torch.equal(first, torch.zeros(x.shape[0], dtype=torch.long))
    with torch.no_grad():
        head.weight.copy_(torch.randn(head.weight.shape, generator=torch.Generator().manual_seed(3)))
    ids = drafter.get_top_tokens(head, x)
    built = drafter.lowbit_head.head
    assert built is not None and torch.equal(ids, _oracle(head, x))
    drafter.get_top_tokens(head, x)
    assert drafter.lowbit_head.head is built  # same weight: not rebuilt
    with torch.no_grad():
        head.weight.neg_()
    ids = drafter.get_top_tokens(head, x)
    assert drafter.lowbit_head.head is not built and torch.equal(ids, _oracle(head, x))
    lines = [r.getMessage() for r in lowbit_log]
    assert sum("DraftHead for the drafter (eagle_head)" in m for m in lines) == 2, lines
    assert "mode=certified" in lines[0] and "coarse=int8 g64" in lines[0]
    counts = stats.snapshot()["counts"]
    assert (counts["draft_vllm_calls"], counts["draft_calls"]) == (1, 3)


def test_nan_weight_keeps_vllm_path(env):
    env(LOWBIT_VLLM="draft")
    plugin.register()
    drafter = _processor("draft_model")
    w = torch.randn(1024, K)
    w[7, 3] = float("nan")
    drafter.get_top_tokens(_head(w), _x())
    assert drafter.lowbit_head.head is None
    assert stats.snapshot()["counts"]["draft_vllm_calls"] == 1


def test_head_settings_from_env(env, lowbit_log):
    env(LOWBIT_VLLM="draft", LOWBIT_VLLM_HEAD_MODE="fast", LOWBIT_VLLM_BITS="4")
    plugin.register()
    drafter = _processor("draft_model")
    head, x = _head(), _x()
    ids = drafter.get_top_tokens(head, x)
    h = drafter.lowbit_head.head
    assert (h.mode, h.bits) == ("fast", 4)
    assert ids.shape == (x.shape[0],)
    assert "mode=fast" in lowbit_log[-1].getMessage()


def test_soft_cap_fallback_logged_once(env, lowbit_log):
    env(LOWBIT_VLLM="draft")
    plugin.register()
    drafter = _processor("draft_model", soft_cap=30.0)
    vllm_own = _processor(None, soft_cap=30.0)
    head, x = _head(), _x()
    for _ in range(3):
        assert torch.equal(drafter.get_top_tokens(head, x), vllm_own.get_top_tokens(head, x))
    msgs = [r.getMessage() for r in lowbit_log if "soft_cap" in r.getMessage()]
    assert len(msgs) == 1, msgs
    assert stats.snapshot()["counts"]["draft_vllm_calls"] == 3
    assert drafter.lowbit_head.head is None


def test_bias_fallback(env, lowbit_log):
    env(LOWBIT_VLLM="draft")
    plugin.register()
    drafter = _processor("draft_model")
    head, x = _head(), _x()
    bias = torch.zeros(1024)
    bias[11] = 1e4  # vLLM's path honours it
    assert (drafter.get_top_tokens(head, x, bias) == 11).all()
    assert any("bias" in r.getMessage() for r in lowbit_log)


def test_another_plugin_keeps_its_processor(env, lowbit_log):
    class Other(LogitsProcessor):
        pass

    op_registry_oot["LogitsProcessor"] = Other
    env(LOWBIT_VLLM="draft")
    plugin.register()
    assert op_registry_oot["LogitsProcessor"] is Other
    assert any("already replaced" in r.getMessage() for r in lowbit_log)


def test_stats_file(env, tmp_path):
    env(LOWBIT_VLLM="draft", LOWBIT_VLLM_STATS=str(tmp_path / "counts"))
    plugin.register()
    drafter = _processor("draft_model")
    head = _head()
    for m in (1, 4):
        drafter.get_top_tokens(head, _x(m))
    got = stats.read(str(tmp_path / "counts"))
    assert got["counts"]["draft_calls"] == 2 and got["counts"]["draft_rows"] == 5
    assert len(got["pids"]) == 1 and len(got["heads"]) == 1 and "DraftHead" in got["heads"][0]


def _dyadic_head(dtype, seed=0):
    """A head of multiples of 1/1024: every logit of dyadic hidden states is exact in fp32, so vLLM's
    GEMM and lowbit's exact values agree bit for bit before the rounding to the model dtype."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randint(-64, 65, (1024, K), generator=g).float() / 1024
    with set_current_vllm_config(VllmConfig()):
        head = ParallelLMHead(V, K, disable_tp=True, params_dtype=dtype)
    with torch.no_grad():
        head.weight.copy_(w)
    head.quant_method.process_weights_after_loading(head)
    return head


def _dyadic_x(dtype, m=6, seed=1):
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(-16, 17, (m, K), generator=g).float() / 16).to(dtype)


@pytest.mark.parametrize("dtype, scale, k, cap", [(torch.float32, 1.0, 8, None), (torch.float32, 0.3, 16, None),
                                                  (torch.bfloat16, 1.0, 8, None), (torch.float32, 0.3, 16, 0.5)],
                         ids=str)
def test_drafter_top_k_matches_vllm(env, dtype, scale, k, cap):
    """The drafter's get_top_k_tokens answers through lowbit with vLLM's own ids and values (soft
    cap included: both select before capping); the target's processor keeps vLLM's method."""
    env(LOWBIT_VLLM="draft")
    plugin.register()
    drafter, target = (_processor("dflash_head", scale=scale, soft_cap=cap),
                       _processor(scale=scale, soft_cap=cap))
    head, x = _dyadic_head(dtype), _dyadic_x(dtype)
    exact = (x.double() @ head.weight[:V].double().t()).to(dtype)  # the logits vLLM's head computes
    top = exact.topk(k + 1).values
    ties = not (top[:, 1:] < top[:, :-1]).all()  # bf16 logits tie: their order is torch.topk's in vLLM
    assert ties == (dtype == torch.bfloat16)
    ids, values = drafter.get_top_k_tokens(head, x, k)
    want_ids, want_values = LogitsProcessor.get_top_k_tokens(drafter, head, x, k)  # vLLM's own method
    assert ids.dtype == want_ids.dtype == torch.int64 and values.dtype == want_values.dtype == torch.float32
    assert torch.equal(values, want_values)
    assert torch.equal(ids, want_ids) or ties
    carried = exact.float().gather(1, ids) * scale
    if cap is not None:
        carried = torch.tanh(carried / cap) * cap
    assert torch.equal(carried, values)  # each id carries its value
    assert (ids.sort(-1).values.diff(dim=-1) > 0).all()
    assert drafter.lowbit_head.head is not None and target.lowbit_head is None
    target_ids, target_values = target.get_top_k_tokens(head, x, k)
    assert torch.equal(target_ids, want_ids) and torch.equal(target_values, want_values)
    counts = stats.snapshot()["counts"]
    assert (counts["draft_topk_calls"], counts["draft_topk_rows"], counts["draft_topk_vllm_calls"]) == (1, 6, 0)


def test_drafter_top_k_log_probs_go_to_vllm(env, lowbit_log):
    env(LOWBIT_VLLM="draft")
    plugin.register()
    drafter, vllm_own = _processor("lilicorr_head"), _processor()
    head, x = _dyadic_head(torch.float32), _dyadic_x(torch.float32)
    for _ in range(2):
        ids, logp = drafter.get_top_k_tokens(head, x, 4, return_log_probs=True)
        want_ids, want_logp = vllm_own.get_top_k_tokens(head, x, 4, return_log_probs=True)
        assert torch.equal(ids, want_ids) and torch.equal(logp, want_logp) and (logp < 0).all()
    msgs = [r.getMessage() for r in lowbit_log if "log-partition" in r.getMessage()]
    assert len(msgs) == 1, msgs
    counts = stats.snapshot()["counts"]
    assert (counts["draft_topk_calls"], counts["draft_topk_vllm_calls"]) == (0, 2)
    assert drafter.lowbit_head.head is None  # log-probs are refused before the weight is read
