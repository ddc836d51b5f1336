#!/usr/bin/env bash
# Thirty-second session, call d: the whole cuda tier on the final defaults again, with the time it
# needs (call c's 430 s cut it at ~96% with no failure: the per-group reference test has five more
# cases a (wide, shape) since the session began, each its own compile).
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 570 python3 -m pytest -m "cuda and not slow" -q -p no:cacheprovider -n 16 --tb=short --durations=15 \
  > "$OUT/pytest_cuda.log" 2>&1; echo "rc=$?"; tail -20 "$OUT/pytest_cuda.log"
grep -E "^(FAILED|ERROR)" "$OUT/pytest_cuda.log" | head -20
grep -m1 -B2 -A30 "^____" "$OUT/pytest_cuda.log" | head -50
