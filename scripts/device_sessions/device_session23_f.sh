#!/usr/bin/env bash
# Session 23, call f: fp4_gemm's re-encode + FP8 GEMM path, second version (the re-encoding as
# 16-bit stores, the flag read behind the queued GEMM): its A/B against the fused kernel at
# M = 128..4096, then the full cuda tier on the final dispatch. Results under $OUT.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 120 python3 scripts/bench_fp4_expand.py --ms 128,256,512,1024,4096 --json "$OUT/fp4_expand.json" \
  > "$OUT/fp4_expand.log" 2>&1; cat "$OUT/fp4_expand.log"
timeout 330 python3 -m pytest -m "cuda and not slow" -q -p no:cacheprovider -n 8 --tb=short \
  > "$OUT/pytest_cuda.log" 2>&1; tail -8 "$OUT/pytest_cuda.log"
