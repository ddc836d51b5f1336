#!/usr/bin/env bash
# Session 24, call b: the gathered kernel's split-K launches (KS programs a row tile, the last part
# adds the partials; measured slower and removed again -- the code is in commit cdf0a07): cuda tests, then every split-K candidate against the table's config on the
# K = 1024 / 4096 shapes, same run (scripts/bench_gathered_mma.py --split-k). Results under $OUT.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 150 python3 -m pytest tests/ops/test_gathered_mma.py tests/ops/test_gathered.py -m cuda -q -p no:cacheprovider -n 4 --tb=short \
  > "$OUT/pytest_gathered.log" 2>&1; tail -4 "$OUT/pytest_gathered.log"
timeout 380 python3 scripts/bench_gathered_mma.py --split-k --ks 1024,4096 --rep 25 > "$OUT/split_k.log" 2>&1; cat "$OUT/split_k.log"
