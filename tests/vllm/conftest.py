"""Tests against a real vLLM: they run only where vLLM is installed (``.vllm-venv``, made by
``scripts/setup_vllm.sh``)::

    bash scripts/setup_vllm.sh && .vllm-venv/bin/python -m pytest tests/vllm -q -p no:cacheprovider

Elsewhere (the main suite's ``.venv``) this directory is left out at collection, before any of its
modules is imported: the check looks for the package without importing it.

Fixtures: ``smollm2_dir``, SmolLM2-135M-Instruct as a plain Hugging Face folder vLLM loads, written
once per test run into a temporary directory (see ``_model.py``); ``LOWBIT_VLLM_TEST_MODEL=DIR``
points it at a folder written earlier by ``python -m tests.vllm._model DIR`` instead;
``vllm_report``, a function that takes a line for the "vLLM numbers" section printed at the end of
the run (with ``-q`` too: the measured acceptance numbers land in CI's log).
"""
from __future__ import annotations

import importlib.util
import os

import pytest

HAS_VLLM = importlib.util.find_spec("vllm") is not None

if not HAS_VLLM:
    collect_ignore_glob = ["*.py"]

_REPORT: list[str] = []


def pytest_terminal_summary(terminalreporter):
    if _REPORT:
        terminalreporter.section("vLLM numbers")
        for line in _REPORT:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def vllm_report():
    def report(line: str) -> None:
        print(line)
        _REPORT.append(line)

    return report


@pytest.fixture(scope="session")
def smollm2_dir(tmp_path_factory) -> str:
    given = os.environ.get("LOWBIT_VLLM_TEST_MODEL")
    if given:
        if not os.path.isfile(os.path.join(given, "config.json")):
            raise ValueError(f"LOWBIT_VLLM_TEST_MODEL={given!r} holds no config.json "
                             "(write one with: python -m tests.vllm._model DIR)")
        return given
    from tests.vllm._model import smollm2_folder

    return smollm2_folder(tmp_path_factory.mktemp("smollm2") / "hf")
