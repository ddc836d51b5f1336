#!/usr/bin/env bash
# Thirtieth session, call e: the whole cuda tier on the final defaults (the INT2 whole-row kernel's
# tail split in two shares up to NB = 16: gluon_wgmma.SPLIT_TAIL = (2, 1)), then fast argmax against
# no split at M = 1..64 in one run.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 400 python3 -m pytest -m "cuda and not slow" -q -p no:cacheprovider -n 14 --tb=short \
  > "$OUT/pytest_cuda.log" 2>&1; echo "rc=$?"; tail -3 "$OUT/pytest_cuda.log"
grep -E "^(FAILED|ERROR)" "$OUT/pytest_cuda.log" | head -30
timeout 150 python3 scripts/bench_coarse_wgmma.py --bits 2,4 --ms 1,4,8,16,32,64 --no-previous \
  --paths "default,no split" --json "$OUT/head_final.json" > "$OUT/head_final.log" 2>&1
python3 scripts/compare_head_paths.py "$OUT/head_final.log"
