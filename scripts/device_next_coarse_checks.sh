#!/usr/bin/env bash
# For the next session's first device call (after the twenty-sixth session): the coarse-wgmma
# cuda tests after the review mend (shared block epilogue / table helpers), INT4 fast mode at
# M = 1..4 on SmolLM2's short-K head on the warp-specialized pass against the mma.sync pass
# ("previous"), the INT2 ring probe's stage variants (the mended probe), and the warp-specialized
# kernel at NB = 64 (84 registers, two CTAs an SM) against the single-partition loop at M = 33..64.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 200 python3 -m pytest tests/ops/test_coarse_wgmma.py -m cuda -q -p no:cacheprovider -n 8 --tb=short \
  > "$OUT/pytest_wgmma.log" 2>&1; tail -3 "$OUT/pytest_wgmma.log"
timeout 150 python3 scripts/bench_coarse_wgmma.py --shapes 49152x576 --bits 4 --ms 1,4,8 \
  --paths "default,previous" --json "$OUT/head_small.json" > "$OUT/head_small.log" 2>&1
cut -c1-300 "$OUT/head_small.log"
timeout 120 python3 scripts/probe_coarse_ring.py --ms 1 --stages 4 --kcands 8 --head 0 \
  --json "$OUT/probe_ring.json" > "$OUT/probe_ring.log" 2>&1
cut -c1-250 "$OUT/probe_ring.log"
timeout 200 python3 scripts/bench_coarse_wgmma.py --bits 2,4 --ms 48,64 --no-previous \
  --paths "default,table ws64,wgmma ws64" --json "$OUT/head_ws64.json" > "$OUT/head_ws64.log" 2>&1
cut -c1-300 "$OUT/head_ws64.log"
