#!/usr/bin/env bash
# Twenty-seventh session, call c: SPAN = {64: 2} on the warp-specialized kernel as the default --
# the coarse / draft-head cuda tests, the span launch's ring / register sweep at M = 33..64, and
# fast argmax end to end at M = 48 / 64 with the new default.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 330 python3 -m pytest tests/ops/test_coarse_wgmma.py tests/ops/test_coarse_head.py tests/test_draft_head.py \
  -m cuda -q -p no:cacheprovider -n 8 --tb=short > "$OUT/pytest_head.log" 2>&1; tail -3 "$OUT/pytest_head.log"
grep -E "^(FAILED|ERROR)" "$OUT/pytest_head.log" | head -20
timeout 150 python3 scripts/tune_coarse_span.py --ms 40,64 --bits 2,4 --json "$OUT/tune_span.json" \
  > "$OUT/tune_span.log" 2>&1
cut -c1-200 "$OUT/tune_span.log"
timeout 100 python3 scripts/bench_coarse_wgmma.py --bits 2,4 --ms 48,64 --no-previous --paths "default" \
  --json "$OUT/head_fast.json" > "$OUT/head_fast.log" 2>&1
cut -c1-300 "$OUT/head_fast.log"
