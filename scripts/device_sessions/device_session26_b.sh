#!/usr/bin/env bash
# Session 26, call b: the per-group pass (INT4) on the warp-specialized kernel (persistent, PDL),
# against its single-partition loop and the INT2 whole-row pass, same run, after the coarse /
# draft-head cuda tests; then where the INT2 pass's time goes with x side by side (ring / mma /
# decode / full stage).
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 240 python3 -m pytest tests/ops/test_coarse_wgmma.py tests/ops/test_coarse_head.py tests/nn/test_draft_head.py \
  -m cuda -q -p no:cacheprovider -n 8 --tb=short > "$OUT/pytest_head.log" 2>&1; tail -3 "$OUT/pytest_head.log"
timeout 200 python3 scripts/bench_coarse_wgmma.py --bits 2,4 --ms 1,8,16,32 --no-previous \
  --paths "table,table single,wgmma,wgmma ws" --json "$OUT/head_fast.json" > "$OUT/head_fast.log" 2>&1
cut -c1-300 "$OUT/head_fast.log"
timeout 120 python3 scripts/probe_coarse_ring.py --ms 1,16 --stages 4 --kcands 8 --head 0 \
  --json "$OUT/probe_ring.json" > "$OUT/probe_ring.log" 2>&1
cut -c1-250 "$OUT/probe_ring.log"
