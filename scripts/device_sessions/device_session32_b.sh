#!/usr/bin/env bash
# Thirty-second session, call b: INT4 fast argmax on the long head and SmolLM2's, the new defaults
# (plane sums converted from a wgmma started at the zero point and magic offset, plane 1 read in
# its high nibble) against each of them undone and both undone, twice over, same run.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
for r in 1 2; do
  timeout 250 python3 scripts/bench_coarse_wgmma.py --bits 4 --ms 1,4,8,16,32,64 --no-previous \
    --shapes 124160x5120,49152x576 --paths "default,i2f,no high nibble,shifted i2f" \
    --json "$OUT/head_b$r.json" > "$OUT/head_b$r.log" 2>&1
  echo "run $r"; python3 scripts/compare_head_paths.py "$OUT/head_b$r.log"
done
