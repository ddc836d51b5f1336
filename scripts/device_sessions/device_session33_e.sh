#!/usr/bin/env bash
# Thirty-third session, call e: the two options left off, each against the default over three
# alternating rounds: the max-and-mask rounds masking before their stores at M = 64 (two blocks a
# program), and the whole-row pass persistent with three programs an SM at M = 1 / 8.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 110 python3 scripts/bench_coarse_wgmma.py --bits 2,4 --ms 64 --no-previous --rounds 3 \
  --paths "default,mask first" --json "$OUT/head_e1.json" > "$OUT/head_e1.log" 2>&1
echo "bench rc=$?"; python3 scripts/compare_head_paths.py "$OUT/head_e1.log"
timeout 80 python3 scripts/bench_coarse_wgmma.py --bits 2 --ms 1,8 --no-previous --rounds 3 \
  --paths "default,table persist 3" --json "$OUT/head_e2.json" > "$OUT/head_e2.log" 2>&1
echo "bench rc=$?"; python3 scripts/compare_head_paths.py "$OUT/head_e2.log"
