#!/usr/bin/env bash
# Twenty-ninth session, call e: the session's defaults (selection keyed by token, the coarse pass's
# late PDL trigger from NB = 16, 4 picks a rerank program from M = 33, x prepared with its first
# loads together) against the previous choice of each -- fast argmax on 124160 x 5120, M = 1..64,
# and SmolLM2's 49152 x 576; the x preparation's GPU tests first.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 100 python3 -m pytest tests/ops/test_coarse_wgmma.py -m cuda -k "x_int8" -q -p no:cacheprovider -n 8 \
  --tb=short > "$OUT/pytest_x.log" 2>&1; tail -2 "$OUT/pytest_x.log"
grep -E "^(FAILED|ERROR)" "$OUT/pytest_x.log" | head -20
P="default,x prep serial,coarse early trigger,rerank 1 row"
timeout 300 python3 scripts/bench_coarse_wgmma.py --bits 2,4 --ms 1,4,8,16,32,64 --no-previous \
  --paths "$P" --json "$OUT/head_final.json" > "$OUT/head_final.log" 2>&1
cut -c1-150 "$OUT/head_final.log"
timeout 80 python3 scripts/bench_coarse_wgmma.py --shapes 49152x576 --bits 2,4 --ms 1,8,16 --no-previous \
  --paths "default,x prep serial" --json "$OUT/head_final_short.json" > "$OUT/head_final_short.log" 2>&1
cut -c1-150 "$OUT/head_final_short.log"
