#!/usr/bin/env bash
# Session 21, call e (#8): with PDL + the trigger rule, the launch configs again -- K4096 on every B, T
# (more chunks in flight a warp: D = 2, 16 warps), and the K <= 1024 shapes with B*T >= 4096 (the
# table's neighbours, with and without the trigger); the gathered cuda tests. Results under $OUT.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT" "$OUT/k4096" "$OUT/big"
timeout 100 python3 -m pytest tests/ops/test_gathered.py tests/ops/test_gathered_mma.py tests/nn/test_markov.py \
  -m cuda -q -p no:cacheprovider -n 4 --tb=short > "$OUT/pytest.log" 2>&1; tail -3 "$OUT/pytest.log"
OUT="$OUT/k4096" timeout 200 python3 scripts/bench_gathered_mma.py --ks 4096 --rep 25 \
  --configs 1x8x1x1,1x8x2x1,1x16x1x1,1x16x2x1,2x8x1x1,2x8x2x1,1x4x2x1,1x8x1x0,1x8x2x0 > "$OUT/k4096.log" 2>&1; cat "$OUT/k4096.log"
OUT="$OUT/big" timeout 120 python3 scripts/bench_gathered_mma.py --ks 256,1024 --min-bt 4096 --rep 25 \
  --variants pdl,trigger > "$OUT/big.log" 2>&1; cat "$OUT/big.log"
