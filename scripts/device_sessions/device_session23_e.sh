#!/usr/bin/env bash
# Session 23, call e: fp4_gemm's re-encode + FP8 GEMM path (prepared, EXPAND_MIN_M off): its cuda
# tests (the re-encoding bit-exact, the flags, the dispatch), then the same-run A/B against the
# fused kernel at M = 64..4096 on the five shapes. Results under $OUT.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 100 python3 -m pytest tests/ops/test_fp4_gemm.py -m cuda -q -p no:cacheprovider -n 4 --tb=short \
  > "$OUT/pytest_fp4.log" 2>&1; tail -3 "$OUT/pytest_fp4.log"
timeout 300 python3 scripts/bench_fp4_expand.py --json "$OUT/fp4_expand.json" > "$OUT/fp4_expand.log" 2>&1
cat "$OUT/fp4_expand.log"
