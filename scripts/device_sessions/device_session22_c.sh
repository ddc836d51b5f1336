#!/usr/bin/env bash
# Session 22, third call: mma_gemv's (RT, W) configs x launch variants in the layer-stack timer on
# the two fp8 shapes where a bare PDL read stays under 1.3x the byte floor (call a: N24576 K1536
# 1.13x, N4096 K7168 1.18x) but fp8_gemm does not (call b: 1.32x, 1.49x at M = 1); then the two
# short shapes at M = 1 (a bare read there is 1.42x already). Results under $OUT.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 330 python3 scripts/sweep_mma_gemv_stack.py --shapes 24576x1536,4096x7168 --ms 1,8 \
  --json "$OUT/sweep.json" > "$OUT/sweep.log" 2>&1; cat "$OUT/sweep.log"
timeout 180 python3 scripts/sweep_mma_gemv_stack.py --shapes 2112x7168,7168x2048 --ms 1 \
  --json "$OUT/sweep_short.json" > "$OUT/sweep_short.log" 2>&1; cat "$OUT/sweep_short.log"
