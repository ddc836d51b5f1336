#!/usr/bin/env bash
# Thirty-first session, call c: call b again after its two faults were mended (the draft head's
# dispatch took the new uint8 scales-and-zeros buffer for the Triton pass's operands; the zeros'
# TMA box of 64 bytes at 64-row blocks left every other ring slot off TMA's 128-byte alignment).
# The whole cuda tier, then INT4 fast argmax of the previous tree (``.bench_old``) and of this one
# on the same machine, with and without the pipelined planes, and INT2 (unchanged kernel) once.
export PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
PYTHONPATH="$PWD" timeout 370 python3 -m pytest -m "cuda and not slow" -q -p no:cacheprovider -n 14 --tb=short \
  > "$OUT/pytest_cuda.log" 2>&1; echo "rc=$?"; tail -3 "$OUT/pytest_cuda.log"
grep -E "^(FAILED|ERROR)" "$OUT/pytest_cuda.log" | head -20
grep -m1 -B2 -A30 "^____" "$OUT/pytest_cuda.log" | head -60
(cd .bench_old && PYTHONPATH="$PWD" timeout 80 python3 scripts/bench_coarse_wgmma.py --bits 4 --ms 1,8,16,32,64 \
  --no-previous --paths "default,ws pipe" --json "$OUT/head_old.json" > "$OUT/head_old.log" 2>&1)
PYTHONPATH="$PWD" timeout 110 python3 scripts/bench_coarse_wgmma.py --bits 4,2 --ms 1,8,16,32,64 --no-previous \
  --paths "default,ws pipe" --json "$OUT/head_new.json" > "$OUT/head_new.log" 2>&1
echo "old"; python3 scripts/compare_head_paths.py "$OUT/head_old.log"
echo "new"; python3 scripts/compare_head_paths.py "$OUT/head_new.log"
