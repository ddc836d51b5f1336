#!/usr/bin/env bash
# Session 24, call d: the whole cuda tier on the final tree (fp4_gemm's re-encode size rule is the
# session's one dispatch change). Results under $OUT.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 480 python3 -m pytest -m "cuda and not slow" -q -p no:cacheprovider -n 8 --tb=short > "$OUT/pytest_cuda.log" 2>&1
tail -15 "$OUT/pytest_cuda.log"
