#!/usr/bin/env bash
# Thirty-second session, call a: the int8-wgmma coarse pass's cuda tests (new cases: the plane
# sums' int32 -> fp32 by magic add / magic start, INT4's plane 1 in its high nibble or shifted),
# then INT4 fast argmax with the per-group kernel's conversions and decodes side by side, same run.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 200 python3 -m pytest -m cuda -q -p no:cacheprovider -n 14 --tb=short tests/ops/test_coarse_wgmma.py \
  > "$OUT/pytest_coarse.log" 2>&1; echo "rc=$?"; tail -3 "$OUT/pytest_coarse.log"
grep -E "^(FAILED|ERROR)" "$OUT/pytest_coarse.log" | head -20
grep -m1 -B2 -A30 "^____" "$OUT/pytest_coarse.log" | head -50
timeout 300 python3 scripts/bench_coarse_wgmma.py --bits 4 --ms 1,8,16,32,64 --no-previous \
  --paths "default,magic start,magic add,shifted i2f" --json "$OUT/head_a.json" > "$OUT/head_a.log" 2>&1
python3 scripts/compare_head_paths.py "$OUT/head_a.log"
