#!/usr/bin/env bash
# Thirty-first session, call g: INT4 at NB = 8 / 16 with two CTAs an SM and an 8-slot ring (twice
# the bytes in flight a CTA; call e found the pass latency-bound, DRAM 62-68% busy) against the
# default (three CTAs of 4 slots at NB = 16, two of 4 at NB = 8), fast argmax at M = 1 / 16.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 120 python3 scripts/bench_coarse_wgmma.py --bits 4 --ms 1,16 --no-previous \
  --paths "default,two CTAs an SM,two CTAs ring 8" --json "$OUT/head_ring8.json" > "$OUT/head_ring8.log" 2>&1
python3 scripts/compare_head_paths.py "$OUT/head_ring8.log"
