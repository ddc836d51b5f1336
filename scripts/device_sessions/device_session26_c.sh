#!/usr/bin/env bash
# Session 26, call c: x resident in shared memory for the persistent warp-specialized kernel
# (X_RESIDENT), whole-row INT2 and per-group INT4, against the streamed x, persistent or not, same
# run; after the coarse / draft-head cuda tests.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 240 python3 -m pytest tests/ops/test_coarse_wgmma.py tests/ops/test_coarse_head.py tests/nn/test_draft_head.py \
  -m cuda -q -p no:cacheprovider -n 8 --tb=short > "$OUT/pytest_head.log" 2>&1; tail -3 "$OUT/pytest_head.log"
timeout 240 python3 scripts/bench_coarse_wgmma.py --bits 2,4 --ms 1,8,16,32 --no-previous \
  --paths "table single,table persist,table res,wgmma ws,wgmma ws single,wgmma ws res" \
  --json "$OUT/head_fast.json" > "$OUT/head_fast.log" 2>&1
cut -c1-260 "$OUT/head_fast.log"
