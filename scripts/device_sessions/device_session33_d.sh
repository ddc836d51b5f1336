#!/usr/bin/env bash
# Thirty-third session, call d: the whole cuda tier on the final tree (int32-key candidate rounds on
# by default; the max-and-mask mask-first and three-programs-an-SM persistent options off).
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 570 python3 -m pytest -m "cuda and not slow" -q -p no:cacheprovider -n 16 --tb=short tests \
  > "$OUT/pytest_cuda.log" 2>&1; echo "rc=$?"; tail -3 "$OUT/pytest_cuda.log"
grep -E "^(FAILED|ERROR)" "$OUT/pytest_cuda.log" | head -20
grep -m1 -B2 -A30 "^____" "$OUT/pytest_cuda.log" | head -50
