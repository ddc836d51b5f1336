#!/usr/bin/env bash
# Session 22, fourth call: fp8_gemm at M = 16 / 32 / 64 on mma_gemv (with its short-launch PDL +
# -O1 rule) against the shipped wgmma GEMV / Gluon decode kernels (bench_gemm_stack --variants
# mma64), and the mma_gemv cuda tests (DEPTH = 2, the launch rule). Results under $OUT.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 240 python3 scripts/bench_gemm_stack.py --ops fp8 --ms 16,32,64 --variants default,mma64 \
  --json "$OUT/gemm_stack_mma64.json" > "$OUT/gemm_stack_mma64.log" 2>&1; cat "$OUT/gemm_stack_mma64.log"
timeout 150 python3 -m pytest tests/ops/test_mma_gemv.py tests/ops/test_fp8_gemm.py -m cuda -q -p no:cacheprovider -n 4 \
  --tb=short > "$OUT/pytest.log" 2>&1; tail -3 "$OUT/pytest.log"
