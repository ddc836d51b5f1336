#!/usr/bin/env bash
# Session 23, call g: the re-encode dispatch tests after the test fix (the FP8 GEMM is queued
# before the flag is read, so the test now spies on the path's result instead of the GEMM call).
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 90 python3 -m pytest tests/ops/test_fp4_gemm.py -m cuda -q -p no:cacheprovider -n 4 --tb=short \
  > "$OUT/pytest_fp4.log" 2>&1; tail -4 "$OUT/pytest_fp4.log"
