#!/usr/bin/env bash
# Session 22, second call: the full cuda tier on the final tree (not run since the twentieth
# session: it covers the review-mended launch path, the draft-head / coarse-head cuda tests left
# from the nineteenth), then the coarse mma pass's ptxas -O1 A/B for INT4 fast mode at M = 1 / 4
# (the only fast-mode band that still runs the mma.sync pass). Results under $OUT.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 290 python3 -m pytest -m "cuda and not slow" -q -p no:cacheprovider --timeout=240 -n 8 \
  > "$OUT/pytest_cuda_full.log" 2>&1; tail -15 "$OUT/pytest_cuda_full.log"
timeout 200 python3 scripts/bench_coarse_ab.py --set schedule --variants "table,table o1" --bits 4 --ms 1,4 \
  --json "$OUT/coarse_o1.json" > "$OUT/coarse_o1.log" 2>&1; cat "$OUT/coarse_o1.log"
