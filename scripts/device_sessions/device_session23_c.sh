#!/usr/bin/env bash
# Session 23, call c: the full cuda tier on the new defaults (fp4_gemm M = 17..64 on the wgmma GEMV
# over 32-row chunks; act_quant a PDL launch up to 8 rows), then the two A/Bs that chose them again
# against the old behaviour (tri64: the Triton kernel at fp4 M = 17..64; aqoff: act_quant never PDL).
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 330 python3 -m pytest -m "cuda and not slow" -q -p no:cacheprovider -n 8 --tb=short \
  > "$OUT/pytest_cuda.log" 2>&1; tail -15 "$OUT/pytest_cuda.log"
timeout 110 python3 scripts/bench_gemm_stack.py --chain --ops fp8,fp4 --ms 1,4,8,16 --variants default,aqoff \
  --json "$OUT/gemm_stack_chain.json" > "$OUT/gemm_stack_chain.log" 2>&1; tail -2 "$OUT/gemm_stack_chain.log"
timeout 100 python3 scripts/bench_gemm_stack.py --ops fp4 --ms 24,32,64 --variants default,tri64 \
  --json "$OUT/gemm_stack_fp4.json" > "$OUT/gemm_stack_fp4.log" 2>&1; tail -2 "$OUT/gemm_stack_fp4.log"
