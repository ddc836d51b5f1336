#!/usr/bin/env bash
# Session 25, call d: the INT2 fast path with PDL (x prep -> coarse -> selection -> rerank) and the
# warp-specialized pass's options: draft-head / coarse cuda tests, then scripts/tune_coarse_ws.py.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 260 python3 -m pytest tests/ops/test_coarse_wgmma.py tests/ops/test_coarse_head.py tests/nn/test_draft_head.py \
  -m cuda -q -p no:cacheprovider -n 8 --tb=short > "$OUT/pytest_head.log" 2>&1; tail -4 "$OUT/pytest_head.log"
timeout 300 python3 scripts/tune_coarse_ws.py --ms 1,16,8,32 --json "$OUT/tune_ws.json" > "$OUT/tune_ws.log" 2>&1
cat "$OUT/tune_ws.log" | cut -c1-230
