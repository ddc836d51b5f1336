#!/usr/bin/env bash
# Thirty-first session, call f: after call e's ncu (INT4 M = 16: DRAM 62% busy, the consumers'
# ring waits 9% of the stall samples, issue slots 60% busy at ncu's locked clocks), the INT4 ring
# at 5 / 6 slots for NB = 8 / 16 against the default 4, fast argmax at M = 8 / 16, one run.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 150 python3 scripts/bench_coarse_wgmma.py --bits 4 --ms 1,16 --no-previous \
  --paths "default,ring 5,ring 6" --json "$OUT/head_ring.json" > "$OUT/head_ring.log" 2>&1
python3 scripts/compare_head_paths.py "$OUT/head_ring.log"
