#!/usr/bin/env bash
# Twenty-ninth session, call d: the new defaults (selection keyed by token, the coarse pass's PDL
# trigger after its last block from NB = 16) against the previous choices, and 2 / 4 picks a rerank
# program -- fast argmax on 124160 x 5120, M = 1..64; the selection's GPU tests first.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 120 python3 -m pytest tests/ops/test_coarse_head.py -m cuda -k "select" -q -p no:cacheprovider -n 8 \
  --tb=short > "$OUT/pytest_select.log" 2>&1; tail -3 "$OUT/pytest_select.log"
grep -E "^(FAILED|ERROR)" "$OUT/pytest_select.log" | head -20
P="default,coarse early trigger,position keys,rerank 2 rows,rerank 4 rows"
timeout 360 python3 scripts/bench_coarse_wgmma.py --bits 2,4 --ms 1,4,8,16,32,64 --no-previous \
  --paths "$P" --json "$OUT/head_rows.json" > "$OUT/head_rows.log" 2>&1
cut -c1-150 "$OUT/head_rows.log"
