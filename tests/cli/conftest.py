from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> str:
    """A random 2-layer Llama + byte-level tokenizer saved to a temp dir (needs transformers)."""
    pytest.importorskip("transformers", reason="the real-model commands need transformers (requirements.txt)")
    from tests.cli._tiny import make_tiny_llama

    return make_tiny_llama(str(tmp_path_factory.mktemp("tiny_llama")))
