#!/usr/bin/env bash
# Twenty-ninth session, call b: the fast path's selection / rerank options against the default --
# the second selection stage keyed by token (select.TOKEN_KEYS: no dependent load after its top-k),
# the selection program at 4 / 16 warps, the rerank's row in one masked load -- fast argmax on
# 124160 x 5120, M = 1..32; the selection tests on the GPU first.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 150 python3 -m pytest tests/ops/test_coarse_head.py -m cuda -k "select" -q -p no:cacheprovider -n 8 \
  --tb=short > "$OUT/pytest_select.log" 2>&1; tail -3 "$OUT/pytest_select.log"
grep -E "^(FAILED|ERROR)" "$OUT/pytest_select.log" | head -20
timeout 300 python3 scripts/bench_coarse_wgmma.py --bits 2,4 --ms 1,8,16,32 --no-previous \
  --paths "default,token keys,select 4 warps,select 16 warps,rerank one load" --json "$OUT/head_tail.json" \
  > "$OUT/head_tail.log" 2>&1
cut -c1-150 "$OUT/head_tail.log"
