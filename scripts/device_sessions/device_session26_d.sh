#!/usr/bin/env bash
# Session 26, call d: the whole cuda tier on the final tree (the coarse pass's 2-byte group codes,
# the per-group warp-specialized kernel on by default up to NB = 32, the non-persistent launch),
# then fast mode end to end with the final defaults against cuBLAS in the same run.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 400 python3 -m pytest -m "cuda and not slow" -q -p no:cacheprovider -n 8 --tb=short > "$OUT/pytest_cuda.log" 2>&1
tail -8 "$OUT/pytest_cuda.log"
timeout 150 python3 scripts/bench_coarse_wgmma.py --bits 2,4 --ms 1,4,8,16,32,64 --no-previous \
  --paths "table,wgmma" --json "$OUT/head_fast.json" > "$OUT/head_fast.log" 2>&1
cut -c1-330 "$OUT/head_fast.log"
