#!/usr/bin/env bash
# Prepared in session 22, not run (device time spent): fp4_gemm at M = 17..64, served today by the
# Triton aligned-step kernel (0.42-0.77x row-wise _scaled_mm at M = 32 / 64), against the two prepared
# replacements: the wgmma GEMV over 32-row chunks with the wgmma's N = 32 (--variants wide64,
# fp4_gemm.triton.WGMMA_GEMV_WIDE) and over 16-row chunks (chunk64, WGMMA_GEMV_CHUNK_MAX_M = 64);
# first their cuda tests (the N = 32 cases of test_fp4_wgmma_gemv.py, the chunk test of
# test_fp4_gemm.py). Then ship the faster one as the default. Results under $OUT.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 150 python3 -m pytest tests/ops/test_fp4_wgmma_gemv.py tests/ops/test_fp4_gemm.py -m cuda -q -p no:cacheprovider \
  -n 4 --tb=short > "$OUT/pytest.log" 2>&1; tail -5 "$OUT/pytest.log"
timeout 150 python3 scripts/bench_gemm_stack.py --ops fp4 --ms 17,32,48,64 --variants default,chunk64,wide64 \
  --json "$OUT/gemm_stack_fp4_wide.json" > "$OUT/gemm_stack_fp4_wide.log" 2>&1; cat "$OUT/gemm_stack_fp4_wide.log"
