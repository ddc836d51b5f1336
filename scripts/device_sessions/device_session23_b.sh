#!/usr/bin/env bash
# Session 23, call b: the benches of call a that failed (bench_gemm_stack.py had lost its --chain flag).
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 125 python3 scripts/bench_gemm_stack.py --ops fp4 --ms 17,32,48,64 --variants default,chunk64,wide64 \
  --json "$OUT/gemm_stack_fp4_wide.json" > "$OUT/gemm_stack_fp4_wide.log" 2>&1; cat "$OUT/gemm_stack_fp4_wide.log"
timeout 105 python3 scripts/bench_gemm_stack.py --ops fp8 --ms 16,32,64 --variants default,wgpdl,wg64pdl \
  --json "$OUT/gemm_stack_wgpdl.json" > "$OUT/gemm_stack_wgpdl.log" 2>&1; cat "$OUT/gemm_stack_wgpdl.log"
timeout 105 python3 scripts/bench_gemm_stack.py --chain --ops fp8,fp4 --ms 1,16 --variants default,aqpdl \
  --json "$OUT/gemm_stack_chain.json" > "$OUT/gemm_stack_chain.log" 2>&1; cat "$OUT/gemm_stack_chain.log"
