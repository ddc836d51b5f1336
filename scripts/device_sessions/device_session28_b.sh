#!/usr/bin/env bash
# Twenty-eighth session, call b: the one-block coarse pass's ring depth and register cap (two or
# three CTAs an SM) at M = 1..32, INT2 / INT4 (scripts/tune_coarse_span.py --variants ring), then
# the whole cuda tier with the sorted-heads epilogue as the default and the fused selection removed.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 220 python3 scripts/tune_coarse_span.py --variants ring --ms 1,8,16,32 --bits 2,4 \
  --json "$OUT/tune_ring.json" > "$OUT/tune_ring.log" 2>&1
cut -c1-200 "$OUT/tune_ring.log"
timeout 340 python3 -m pytest -m "cuda and not slow" -q -p no:cacheprovider -n 8 --tb=short > "$OUT/pytest_cuda.log" 2>&1
tail -8 "$OUT/pytest_cuda.log"
grep -E "^(FAILED|ERROR)" "$OUT/pytest_cuda.log" | head -20
