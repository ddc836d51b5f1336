#!/usr/bin/env bash
# Session 22, sixth call: the final fp8_gemm dispatch (M = 17..32 on the Gluon decode kernel for
# short weights) -- its cuda tests (decode band, mma_gemv) and the layer stack at M = 17 / 32.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 150 python3 -m pytest tests/ops/test_fp8_gemm.py tests/ops/test_mma_gemv.py tests/nn/test_linear.py -m cuda -q \
  -p no:cacheprovider -n 4 --tb=short > "$OUT/pytest.log" 2>&1; tail -3 "$OUT/pytest.log"
timeout 150 python3 scripts/bench_gemm_stack.py --ops fp8 --ms 17,32 --variants default,dg17 \
  --json "$OUT/gemm_stack_final.json" > "$OUT/gemm_stack_final.log" 2>&1; cat "$OUT/gemm_stack_final.log"
# fp4_gemm at M = 32 / 64 (the Triton aligned-step kernel, 0.42-0.62x row-wise _scaled_mm at M = 64
# in the sixteenth session) against mma_gemv there (--variants fp4mma64)
timeout 150 python3 scripts/bench_gemm_stack.py --ops fp4 --ms 32,64 --variants default,fp4mma64 \
  --json "$OUT/gemm_stack_fp4mma64.json" > "$OUT/gemm_stack_fp4mma64.log" 2>&1; cat "$OUT/gemm_stack_fp4mma64.log"
