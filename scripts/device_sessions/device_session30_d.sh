#!/usr/bin/env bash
# Thirtieth session, call d: the coarse pass's tail split by stages (gluon_wgmma.SPLIT_TAIL: the
# row blocks past a multiple of U x 132 SMs run as P programs of 1 / P of the stages each, met
# through a ticket) -- the coarse-pass cuda tests (the split ones and every other: the default's
# SASS is unchanged offline), then fast argmax with the split against none in one run.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 200 python3 -m pytest tests/ops/test_coarse_wgmma.py -m cuda -q -p no:cacheprovider -n 14 --tb=short \
  > "$OUT/pytest_split.log" 2>&1; echo "rc=$?"; tail -2 "$OUT/pytest_split.log"
grep -E "^(FAILED|ERROR)" "$OUT/pytest_split.log" | head -20
timeout 200 python3 scripts/bench_coarse_wgmma.py --bits 2,4 --ms 1,8,16 --no-previous \
  --paths "default,split 2,split 3,split 4,split 3 x2,split 4 x3" --json "$OUT/head_split.json" > "$OUT/head_split.log" 2>&1
python3 scripts/compare_head_paths.py "$OUT/head_split.log"
