#!/usr/bin/env bash
# For the next session's first device call (after the twenty-seventh session): the selection run
# inside the rerank launch (select.FUSE_SELECT_MAX_M, off until timed) -- its GPU-tier tests, then
# fast argmax with it against the two launches on 124160 x 5120 (INT2 / INT4, M = 1..16) and on
# SmolLM2's 49152 x 576 head (M = 1 / 8). If "fused select" is faster at M <= some m, set
# FUSE_SELECT_MAX_M to that m (INT4 at M = 1 needs ~2.3 us less for 1.30x its byte floor).
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 200 python3 -m pytest tests/ops/test_coarse_head.py -m cuda -q -p no:cacheprovider -n 8 --tb=short \
  -k "select or fused" > "$OUT/pytest_select.log" 2>&1; tail -3 "$OUT/pytest_select.log"
timeout 200 python3 scripts/bench_coarse_wgmma.py --bits 2,4 --ms 1,4,8,16 --no-previous \
  --paths "default,fused select" --json "$OUT/head_fused.json" > "$OUT/head_fused.log" 2>&1
cut -c1-300 "$OUT/head_fused.log"
timeout 100 python3 scripts/bench_coarse_wgmma.py --shapes 49152x576 --bits 2,4 --ms 1,8 --no-previous \
  --paths "default,fused select" --json "$OUT/head_small_fused.json" > "$OUT/head_small_fused.log" 2>&1
cut -c1-260 "$OUT/head_small_fused.log"
