#!/usr/bin/env bash
# Session 26, call e: INT4 fast argmax at M = 1..8 -- the module defaults (the mma.sync pass up to
# M = 4) against the per-group warp-specialized kernel at every M, same run.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 150 python3 scripts/bench_coarse_wgmma.py --bits 4 --ms 1,4,8,16 --no-previous \
  --paths "default,wgmma ws single" --json "$OUT/head_int4.json" > "$OUT/head_int4.log" 2>&1
cut -c1-300 "$OUT/head_int4.log"
