#!/usr/bin/env bash
# Twenty-seventh session, call e: the per-group words stage-major ([P NS, NP], one TMA box [P, R]:
# INT4 reads 8 bytes a row and stage instead of 16) -- the coarse / draft-head cuda tests, fast
# argmax on 124160 x 5120 at every M with the defaults, and SmolLM2's short-K head (49152 x 576)
# at M = 1 / 8 / 64 with the defaults against one block a program (SPAN = {}) and the mma.sync pass.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 300 python3 -m pytest tests/ops/test_coarse_wgmma.py tests/ops/test_coarse_head.py tests/nn/test_draft_head.py \
  -m cuda -q -p no:cacheprovider -n 8 --tb=short > "$OUT/pytest_head.log" 2>&1; tail -3 "$OUT/pytest_head.log"
grep -E "^(FAILED|ERROR)" "$OUT/pytest_head.log" | head -20
timeout 150 python3 scripts/bench_coarse_wgmma.py --bits 2,4 --ms 1,4,8,16,32,64 --no-previous --paths "default" \
  --json "$OUT/head_fast.json" > "$OUT/head_fast.log" 2>&1
cut -c1-300 "$OUT/head_fast.log"
timeout 100 python3 scripts/bench_coarse_wgmma.py --shapes 49152x576 --bits 2,4 --ms 1,8,64 \
  --paths "default,one block,previous" --json "$OUT/head_small.json" > "$OUT/head_small.log" 2>&1
cut -c1-260 "$OUT/head_small.log"
