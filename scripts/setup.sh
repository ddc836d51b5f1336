#!/usr/bin/env bash
# Create .venv and install lowbit with every pinned dependency (CPU machine, Python >= 3.10).
# Used by the README's first command and by .ci/run, so the two can never disagree.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -r requirements.txt
.venv/bin/python -m pip install -q --no-deps -e .
echo "lowbit installed in .venv ($(.venv/bin/lowbit --version))"
