#!/usr/bin/env bash
# Session 25, call e: the fast path's new defaults (persistent warp-specialized pass, 80 registers
# at NB 16 / 32, 8-warp selection): draft-head / coarse cuda tests, the selection with 8 / 16
# warps, then fast mode end to end against cuBLAS (scripts/bench_coarse_wgmma.py, INT2 and INT4).
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 200 python3 -m pytest tests/ops/test_coarse_wgmma.py tests/nn/test_draft_head.py \
  -m cuda -q -p no:cacheprovider -n 8 --tb=short > "$OUT/pytest_head.log" 2>&1; tail -3 "$OUT/pytest_head.log"
timeout 100 python3 scripts/tune_coarse_ws.py --ms 1,16 --coarse default --warps 8,16 --json "$OUT/tune_ws.json" \
  > "$OUT/tune_ws.log" 2>&1; cut -c1-200 "$OUT/tune_ws.log"
timeout 240 python3 scripts/bench_coarse_wgmma.py --bits 2,4 --ms 1,4,8,16,32,64 --no-previous --paths "table,wgmma" \
  --json "$OUT/head_fast.json" > "$OUT/head_fast.log" 2>&1; cut -c1-330 "$OUT/head_fast.log"
