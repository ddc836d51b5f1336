#!/usr/bin/env bash
# One GPU call for the NVFP4 gathered tensor-core kernel (and the decode GEMV it shares ideas
# with): their cuda tests, the gathered sweep against the CUDA-core kernel, the GEMV sweep, then
# (unless SKIP_FULL is set) the whole cuda tier and the SASS check. Results under $OUT.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
[ -z "${SKIP_QUICK:-}" ] && timeout 200 python3 -m pytest tests/ops/test_gathered.py tests/ops/test_gathered_mma.py tests/nn/test_markov.py ${EXTRA_TESTS:-} \
  -m cuda -q -p no:cacheprovider -x > "$OUT/pytest_gathered.log" 2>&1
[ -z "${SKIP_QUICK:-}" ] && tail -3 "$OUT/pytest_gathered.log"
timeout "${T_SWEEP:-300}" python3 scripts/bench_gathered_mma.py "$@" > "$OUT/sweep.log" 2>&1; cat "$OUT/sweep.log"
if [ -n "${GEMV:-}" ]; then
  timeout 200 python3 scripts/bench_mma_gemv.py --json "$OUT/mma_gemv.json" --configs "$GEMV" > "$OUT/mma_gemv.log" 2>&1
  cat "$OUT/mma_gemv.log"
fi
if [ -z "${SKIP_FULL:-}" ]; then
  timeout 240 python3 -m pytest -m "cuda and not slow" -q -p no:cacheprovider --timeout=300 -n 8 > "$OUT/pytest_cuda.log" 2>&1
  tail -15 "$OUT/pytest_cuda.log"
  timeout 60 python3 scripts/check_sass.py > "$OUT/sass.txt" 2>&1; tail -3 "$OUT/sass.txt"
fi
