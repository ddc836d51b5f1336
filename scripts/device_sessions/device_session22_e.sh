#!/usr/bin/env bash
# Session 22, fifth call: fp8_gemm at M = 17..32, which no decode kernel serves (call d: M = 32
# N7168 K2048 10.62 us against 7.77 at M = 64), on the Gluon decode kernel (--variants dg17).
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 200 python3 scripts/bench_gemm_stack.py --ops fp8 --ms 17,24,32 --variants default,dg17 \
  --json "$OUT/gemm_stack_dg17.json" > "$OUT/gemm_stack_dg17.log" 2>&1; cat "$OUT/gemm_stack_dg17.log"
