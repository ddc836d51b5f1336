#!/usr/bin/env bash
# Twenty-seventh session, call d: the coarse / draft-head cuda tests with SPAN = {64: 2} (call c
# named a wrong path), and what the candidate epilogue costs: the coarse pass at kcand 1 vs 8,
# one block a program vs two, M = 1..64.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 330 python3 -m pytest tests/ops/test_coarse_wgmma.py tests/ops/test_coarse_head.py tests/nn/test_draft_head.py \
  -m cuda -q -p no:cacheprovider -n 8 --tb=short > "$OUT/pytest_head.log" 2>&1; tail -3 "$OUT/pytest_head.log"
grep -E "^(FAILED|ERROR)" "$OUT/pytest_head.log" | head -20
timeout 200 python3 scripts/tune_coarse_span.py --ms 1,16,32,64 --bits 2,4 --kcands 1,8 --variants default \
  --json "$OUT/tune_kcand.json" > "$OUT/tune_kcand.log" 2>&1
cut -c1-200 "$OUT/tune_kcand.log"
