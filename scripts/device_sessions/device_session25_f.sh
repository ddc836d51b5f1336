#!/usr/bin/env bash
# Session 25, call f: x in side-by-side tiles for every int8-wgmma coarse kernel (INT4 per group,
# INT2 at NB = 64 too): coarse / draft-head cuda tests, then fast mode end to end, wide against
# narrow x, INT2 and INT4, against cuBLAS in the same run.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 200 python3 -m pytest tests/ops/test_coarse_wgmma.py tests/ops/test_coarse_head.py tests/nn/test_draft_head.py \
  -m cuda -q -p no:cacheprovider -n 8 --tb=short > "$OUT/pytest_head.log" 2>&1; tail -3 "$OUT/pytest_head.log"
timeout 260 python3 scripts/bench_coarse_wgmma.py --bits 2,4 --ms 1,8,16,32,64 --no-previous \
  --paths "table,table x narrow,wgmma,wgmma x narrow" --json "$OUT/head_fast.json" > "$OUT/head_fast.log" 2>&1
cut -c1-300 "$OUT/head_fast.log"
