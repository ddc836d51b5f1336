#!/usr/bin/env bash
# Seventh session, second GPU call: the coarse-head cuda tests (with the new K-loop schedules),
# then the A/B of the schedules on the 124160 x 5120 head. Results under $OUT.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 150 python3 -m pytest tests/ops/test_coarse_head.py -m cuda -q -p no:cacheprovider -n 8 --timeout=300 \
  > "$OUT/pytest_coarse.log" 2>&1; tail -3 "$OUT/pytest_coarse.log"
timeout 400 python3 scripts/bench_coarse_prefetch.py --json "$OUT/prefetch.json" ${MS:+--ms $MS} ${BITS:+--bits $BITS} \
  > "$OUT/prefetch.log" 2>&1; cat "$OUT/prefetch.log"
