#!/usr/bin/env bash
# Session 26, call f: INT4 fast mode on the int8-wgmma pass from M = 1 (WGMMA_M_RANGE): the
# draft-head / coarse-head cuda tests through the dispatch.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 150 python3 -m pytest tests/nn/test_draft_head.py tests/ops/test_coarse_head.py -m cuda -q -p no:cacheprovider \
  -n 8 --tb=short > "$OUT/pytest_head.log" 2>&1; tail -3 "$OUT/pytest_head.log"
