#!/usr/bin/env bash
# Thirty-second session, call e: INT4 fast argmax at M = 8 / 16 / 32 on the final defaults against
# existing switches whose best setting may have moved with the new per-group stage (two CTAs an SM
# at NB = 16 instead of three, the early selection trigger, no pipelined planes, the split tail,
# the high-nibble plane 1 at every NB, 2 picks a rerank program), twice over, same run.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
for r in 1 2; do
  timeout 110 python3 scripts/bench_coarse_wgmma.py --bits 4 --ms 8,16,32 --no-previous \
    --paths "default,two CTAs an SM,coarse early trigger,no ws pipe,split 2,high nibble,rerank 2 rows" \
    --json "$OUT/head_e$r.json" > "$OUT/head_e$r.log" 2>&1
  echo "run $r"; python3 scripts/compare_head_paths.py "$OUT/head_e$r.log"
done
