#!/usr/bin/env bash
# Session 25, call c: x in side-by-side tiles for the warp-specialized INT2 pass (X_WIDE) and the
# split x preparation: cuda tests, then fast mode end to end against the per-plane x tiles and
# cuBLAS in the same run. Results under $OUT.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 200 python3 -m pytest tests/ops/test_coarse_wgmma.py -m cuda -q -p no:cacheprovider -n 8 --tb=short \
  > "$OUT/pytest_wgmma.log" 2>&1; tail -4 "$OUT/pytest_wgmma.log"
timeout 300 python3 scripts/bench_coarse_wgmma.py --bits 2 --ms 1,4,8,16,32 --paths "table,table x narrow" \
  --json "$OUT/head_fast.json" > "$OUT/head_fast.log" 2>&1
tail -20 "$OUT/head_fast.log"
timeout 90 python3 scripts/probe_coarse_ring.py --ms 1,16 --modes full --stages 4 --kcands 8 > "$OUT/probe_ring.log" 2>&1
tail -8 "$OUT/probe_ring.log"
