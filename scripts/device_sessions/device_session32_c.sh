#!/usr/bin/env bash
# Thirty-second session, call c: the whole cuda tier on the final defaults (the per-group kernel's
# plane sums converted from a wgmma started at the zero point and magic offset at NB = 16 / 32 / 64,
# INT4's plane 1 read in its high nibble at NB = 8), then fast argmax at M = 1..64, INT2 and INT4,
# against both undone ("shifted i2f", the previous tree's per-group pass), same run.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 430 python3 -m pytest -m "cuda and not slow" -q -p no:cacheprovider -n 14 --tb=short \
  > "$OUT/pytest_cuda.log" 2>&1; echo "rc=$?"; tail -3 "$OUT/pytest_cuda.log"
grep -E "^(FAILED|ERROR)" "$OUT/pytest_cuda.log" | head -20
grep -m1 -B2 -A30 "^____" "$OUT/pytest_cuda.log" | head -50
timeout 140 python3 scripts/bench_coarse_wgmma.py --bits 2,4 --ms 1,4,8,16,32,64 --no-previous \
  --paths "default,shifted i2f" --json "$OUT/head_final.json" > "$OUT/head_final.log" 2>&1
python3 scripts/compare_head_paths.py "$OUT/head_final.log"
