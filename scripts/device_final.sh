#!/usr/bin/env bash
# The closing GPU call of the gathered work: the cuda tests of the gathered ops, the registered
# benchmark on all 36 shapes (`lowbit bench --op gathered_bias`, table + JSON + PNG), then the
# sweep of the picked configs and their neighbours. Results under $OUT.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 150 python3 -m pytest tests/ops/test_gathered.py tests/ops/test_gathered_mma.py tests/nn/test_markov.py \
  -m cuda -q -p no:cacheprovider -n 4 > "$OUT/pytest_gathered.log" 2>&1; tail -3 "$OUT/pytest_gathered.log"
timeout 200 python3 -m lowbit.cli bench --op gathered_bias --out "$OUT" > "$OUT/bench.log" 2>&1; tail -40 "$OUT/bench.log"
timeout 150 python3 scripts/bench_gathered_mma.py --rep 20 > "$OUT/sweep.log" 2>&1; cat "$OUT/sweep.log"
