#!/usr/bin/env bash
# Session 24, call i: the fp4 cuda tests after the re-encode path's size rule took its final form
# (M N K >= 2^35 eagerly, 2^33 under graph capture). Results under $OUT.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 120 python3 -m pytest tests/ops/test_fp4_gemm.py -m cuda -q -p no:cacheprovider -n 4 --tb=short \
  > "$OUT/pytest_fp4.log" 2>&1; tail -4 "$OUT/pytest_fp4.log"
