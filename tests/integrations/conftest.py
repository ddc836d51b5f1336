"""Every test of the vLLM adapters starts and ends with fresh plugin settings and call counts."""
from __future__ import annotations

import pytest

from lowbit.integrations.vllm import config, stats


@pytest.fixture(autouse=True)
def _fresh_counts(monkeypatch):
    monkeypatch.delenv("LOWBIT_VLLM_STATS", raising=False)
    config.reset()
    stats.reset()
    yield
    config.reset()
    stats.reset()
