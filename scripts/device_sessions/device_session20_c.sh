#!/usr/bin/env bash
# Session 20, call c (#8): LEAN with x loaded by the B-column lanes only again -- the gathered cuda
# tests and the picked config against the old kernel on all 36 shapes. Results under $OUT.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT" "$OUT/ab"
OUT="$OUT/ab" timeout 100 python3 scripts/bench_gathered_mma.py --picked --variants old --rep 25 > "$OUT/ab.log" 2>&1; cat "$OUT/ab.log"
timeout 90 python3 -m pytest tests/ops/test_gathered.py tests/ops/test_gathered_mma.py tests/nn/test_markov.py \
  -m cuda -q -p no:cacheprovider -n 4 > "$OUT/pytest_gathered.log" 2>&1; tail -2 "$OUT/pytest_gathered.log"
