#!/usr/bin/env bash
# Twenty-ninth session, call f: the whole cuda tier on the session's final code.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 440 python3 -m pytest -m "cuda and not slow" -q -p no:cacheprovider -n 14 --tb=short \
  > "$OUT/pytest_cuda.log" 2>&1; echo "rc=$?"; tail -3 "$OUT/pytest_cuda.log"
grep -E "^(FAILED|ERROR)" "$OUT/pytest_cuda.log" | head -30
