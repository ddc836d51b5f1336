#!/usr/bin/env bash
# Seventh session, third GPU call: coarse-head + draft-head cuda tests, then the A/B of the
# tensor-core pass's schedule table, masked B-fragment loads and streaming code loads. $OUT.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 200 python3 -m pytest tests/ops/test_coarse_head.py tests/nn/test_draft_head.py -m cuda -q -p no:cacheprovider \
  -n 8 --timeout=300 > "$OUT/pytest_coarse.log" 2>&1; tail -3 "$OUT/pytest_coarse.log"
timeout 380 python3 scripts/bench_coarse_prefetch.py --json "$OUT/prefetch.json" --ms ${MS:-1,8,16} \
  --variants "${VARIANTS:-p0 caps,table,table xmask,table xmask cg,table xmask cg evict_first,p0 xmask cg}" \
  > "$OUT/prefetch.log" 2>&1; cat "$OUT/prefetch.log"
