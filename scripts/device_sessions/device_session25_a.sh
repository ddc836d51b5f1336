#!/usr/bin/env bash
# Session 25, call a: the fp4 cuda tests left from session 24 (size rule's final constants), then
# where the INT2 whole-row coarse pass's time goes (scripts/probe_coarse_ring.py). Results under $OUT.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 150 python3 -m pytest tests/ops/test_fp4_gemm.py -m cuda -q -p no:cacheprovider -n 4 --tb=short \
  > "$OUT/pytest_fp4.log" 2>&1; tail -4 "$OUT/pytest_fp4.log"
timeout 380 python3 scripts/probe_coarse_ring.py --ms 1,16,8 --json "$OUT/probe_ring.json" > "$OUT/probe_ring.log" 2>&1
tail -40 "$OUT/probe_ring.log"
