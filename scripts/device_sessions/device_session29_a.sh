#!/usr/bin/env bash
# Twenty-ninth session, call a: the coarse pass's first ring lap of weights issued before the PDL
# wait (EARLY_WEIGHTS, new) -- its cuda test, then fast argmax against the default on 124160 x 5120
# and SmolLM2's 49152 x 576 -- and where the fast argmax's time after the coarse pass goes
# (probe_fast_tail.py: x preparation, selection, rerank, each alone and in the chain).
# EARLY_WEIGHTS (the warp-specialized producer issuing its first ring lap's codes and words before
# griddepcontrol.wait, their x after it; its cuda test compared every output bit for bit with the
# default order: 24 passed) measured within noise (fast argmax -0.5..+0.5 us on 124160 x 5120,
# +0.1..+0.5 on 49152 x 576) and was not kept: only probe_fast_tail.py of this script still runs.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 120 python3 -m pytest tests/ops/test_coarse_wgmma.py -m cuda -k early_weights -q -p no:cacheprovider -n 8 \
  --tb=short > "$OUT/pytest_early.log" 2>&1; tail -3 "$OUT/pytest_early.log"
grep -E "^(FAILED|ERROR)" "$OUT/pytest_early.log" | head -20
timeout 200 python3 scripts/bench_coarse_wgmma.py --bits 2,4 --ms 1,8,16,32 --no-previous \
  --paths "default,early weights" --json "$OUT/head_early.json" > "$OUT/head_early.log" 2>&1
cut -c1-200 "$OUT/head_early.log"
timeout 90 python3 scripts/bench_coarse_wgmma.py --shapes 49152x576 --bits 2,4 --ms 1,8,16 --no-previous \
  --paths "default,early weights" --json "$OUT/head_early_short.json" > "$OUT/head_early_short.log" 2>&1
cut -c1-200 "$OUT/head_early_short.log"
timeout 120 python3 scripts/probe_fast_tail.py --ms 1,8,16 --bits 2,4 --json "$OUT/tail.json" \
  > "$OUT/tail.log" 2>&1
cat "$OUT/tail.log" | cut -c1-400
