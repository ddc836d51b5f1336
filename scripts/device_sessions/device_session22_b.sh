#!/usr/bin/env bash
# Session 22, second call: the full cuda tier on the final tree (not run since the twentieth
# session: it covers the review-mended launch path, the draft-head / coarse-head cuda tests left
# from the nineteenth), then the coarse mma pass's ptxas -O1 A/B for INT4 fast mode at M = 1 / 4
# (the only fast-mode band that still runs the mma.sync pass), and the mma_gemv short-launch rule
# (PDL + ptxas -O1) against plain launches. Results under $OUT.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 280 python3 -m pytest -m "cuda and not slow" -q -p no:cacheprovider --timeout=240 -n 8 \
  > "$OUT/pytest_cuda_full.log" 2>&1; tail -15 "$OUT/pytest_cuda_full.log"
timeout 120 python3 scripts/bench_coarse_ab.py --set schedule --variants "table,table o1" --bits 4 --ms 1,4 \
  --json "$OUT/coarse_o1.json" > "$OUT/coarse_o1.log" 2>&1; cat "$OUT/coarse_o1.log"
# the short-launch rule of mma_gemv (PDL + ptxas -O1 at <= 32 MiB of weight) against plain
# launches, fp8 (M <= 8 runs mma_gemv) and fp4 (M <= 16) in the same run
timeout 200 python3 scripts/bench_gemm_stack.py --ops fp8,fp4 --ms 1,8,16 --variants default,plain \
  --json "$OUT/gemm_stack_rule.json" > "$OUT/gemm_stack_rule.log" 2>&1; cat "$OUT/gemm_stack_rule.log"
