#!/usr/bin/env bash
# Session 26, call a: the whole-row INT2 pass reads 2-byte group codes (its byte tables built in the
# kernel) instead of 4-byte table words: coarse / draft-head cuda tests, fast mode end to end against
# cuBLAS in the same run, then the warp-specialized pass's register caps / ring depths re-swept.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 200 python3 -m pytest tests/ops/test_coarse_wgmma.py tests/ops/test_coarse_head.py tests/nn/test_draft_head.py \
  -m cuda -q -p no:cacheprovider -n 8 --tb=short > "$OUT/pytest_head.log" 2>&1; tail -3 "$OUT/pytest_head.log"
timeout 150 python3 scripts/bench_coarse_wgmma.py --bits 2 --ms 1,8,16,32,64 --no-previous \
  --paths "table" --json "$OUT/head_fast.json" > "$OUT/head_fast.log" 2>&1
cut -c1-330 "$OUT/head_fast.log"
timeout 200 python3 scripts/tune_coarse_ws.py --ms 1,16,32 --warps 8 --json "$OUT/tune_ws.json" > "$OUT/tune_ws.log" 2>&1
cut -c1-250 "$OUT/tune_ws.log"
