#!/usr/bin/env bash
# Thirty-first session, call b: the per-group pass's scales and zeros in 2 P + 1 bytes a row and
# stage (fp16 scales + one byte of zeros, two TMA boxes) instead of 4 P (int32 words). The coarse
# and draft-head cuda tests, then INT4 fast argmax of the previous tree (``.bench_old``: a copy of
# lowbit/ and scripts/ at the commit before, carried by the call) and of this one, one after the
# other on the same machine, each with and without the pipelined planes.
export PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
PYTHONPATH="$PWD" timeout 300 python3 -m pytest tests/ops/test_coarse_wgmma.py tests/nn/test_draft_head.py -m cuda -q \
  -p no:cacheprovider -n 14 --tb=short > "$OUT/pytest_coarse.log" 2>&1; echo "rc=$?"; tail -3 "$OUT/pytest_coarse.log"
grep -E "^(FAILED|ERROR)" "$OUT/pytest_coarse.log" | head -30
for round in 1 2; do
  (cd .bench_old && PYTHONPATH="$PWD" timeout 150 python3 scripts/bench_coarse_wgmma.py --bits 4 --ms 1,8,16,32,64 \
    --no-previous --paths "default,ws pipe" --json "$OUT/head_old_$round.json" > "$OUT/head_old_$round.log" 2>&1)
  PYTHONPATH="$PWD" timeout 150 python3 scripts/bench_coarse_wgmma.py --bits 4 --ms 1,8,16,32,64 --no-previous \
    --paths "default,ws pipe" --json "$OUT/head_new_$round.json" > "$OUT/head_new_$round.log" 2>&1
  echo "round $round old"; python3 scripts/compare_head_paths.py "$OUT/head_old_$round.log"
  echo "round $round new"; python3 scripts/compare_head_paths.py "$OUT/head_new_$round.log"
done
