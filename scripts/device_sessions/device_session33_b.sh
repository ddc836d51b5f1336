#!/usr/bin/env bash
# Thirty-third session, call b: the tail probe again with the pass's sums kept live at kcand 0
# (call a's kcand-0 pass had its decode and wgmmas removed as dead code: that row was the bare
# ring), so "epilogue in pass" is the candidate epilogue alone; then INT4 at M = 8 / 16 against a
# persistent launch and two CTAs an SM, three alternating rounds.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 150 python3 scripts/probe_fast_tail.py --ms 1,8,16,32 --bits 2,4 --json "$OUT/tail_b.json" \
  > "$OUT/tail_b.log" 2>&1; echo "probe rc=$?"; tail -8 "$OUT/tail_b.log"
timeout 200 python3 scripts/bench_coarse_wgmma.py --bits 4 --ms 8,16 --no-previous --rounds 3 \
  --paths "default,wgmma ws,two CTAs an SM" --json "$OUT/head_b.json" > "$OUT/head_b.log" 2>&1
echo "bench rc=$?"; python3 scripts/compare_head_paths.py "$OUT/head_b.log"
