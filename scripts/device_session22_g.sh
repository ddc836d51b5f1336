#!/usr/bin/env bash
# Session 22, seventh call: fp4_gemm at M = 17..32 as the wgmma GEMV over 16-row chunks
# (--variants chunk32: fp4_gemm.triton.WGMMA_GEMV_CHUNK_MAX_M = 32) against the Triton aligned-step
# kernel (the default while it is untimed). Prepared in session 22, not run (device time spent).
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 60 python3 -m pytest tests/ops/test_fp4_gemm.py -m cuda -q -p no:cacheprovider -k "chunks or shapes" --tb=short \
  > "$OUT/pytest.log" 2>&1; tail -3 "$OUT/pytest.log"
timeout 80 python3 scripts/bench_gemm_stack.py --ops fp4 --ms 17,32 --variants default,chunk32 \
  --json "$OUT/gemm_stack_chunks.json" > "$OUT/gemm_stack_chunks.log" 2>&1; cat "$OUT/gemm_stack_chunks.log"
