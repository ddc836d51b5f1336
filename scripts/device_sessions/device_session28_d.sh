#!/usr/bin/env bash
# Twenty-eighth session, call d: the whole cuda tier on the tree with three CTAs an SM on long heads
# (THREE_CTAS_MIN_STAGES), the sorted-heads epilogue and the fused selection removed; then SmolLM2's
# short head with the defaults (two CTAs an SM there) against 56 registers there too.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 60 python3 scripts/bench_coarse_wgmma.py --shapes 49152x576 --bits 2,4 --ms 1,8,16 --no-previous \
  --paths "default,three CTAs short" --json "$OUT/head_small.json" > "$OUT/head_small.log" 2>&1
cut -c1-200 "$OUT/head_small.log"
timeout 420 python3 -m pytest -m "cuda and not slow" -q -p no:cacheprovider -n 14 --tb=short > "$OUT/pytest_cuda.log" 2>&1
tail -8 "$OUT/pytest_cuda.log"
grep -E "^(FAILED|ERROR)" "$OUT/pytest_cuda.log" | head -20
