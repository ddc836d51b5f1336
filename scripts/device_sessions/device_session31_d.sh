#!/usr/bin/env bash
# Thirty-first session, call d: the whole cuda tier on the final defaults (the per-group pass's
# 5-byte scales and zeros, its pipelined planes at NB <= 32: WS_PIPE_GROUP), then fast argmax
# against "no ws pipe" at M = 1..64, INT2 and INT4, in one run.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 440 python3 -m pytest -m "cuda and not slow" -q -p no:cacheprovider -n 14 --tb=short \
  > "$OUT/pytest_cuda.log" 2>&1; echo "rc=$?"; tail -3 "$OUT/pytest_cuda.log"
grep -E "^(FAILED|ERROR)" "$OUT/pytest_cuda.log" | head -20
timeout 140 python3 scripts/bench_coarse_wgmma.py --bits 2,4 --ms 1,4,8,16,32,64 --no-previous \
  --paths "default,no ws pipe" --json "$OUT/head_final.json" > "$OUT/head_final.log" 2>&1
python3 scripts/compare_head_paths.py "$OUT/head_final.log"
