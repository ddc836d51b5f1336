#!/usr/bin/env bash
# Twenty-eighth session, call e: the warp-specialized kernels' producer warp at 24 registers (the
# consumers get the rest of the launch cap: 72 at 56, which un-serializes the INT2 NB = 16 wgmma
# chain offline) against 40 -- fast argmax on 124160 x 5120, M = 1..64 -- and the coarse-pass cuda
# tests with it.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 150 python3 scripts/bench_coarse_wgmma.py --bits 2,4 --ms 1,8,16,32,64 --no-previous \
  --paths "default,producer 40" --json "$OUT/head_producer.json" > "$OUT/head_producer.log" 2>&1
cut -c1-200 "$OUT/head_producer.log"
timeout 150 python3 -m pytest tests/ops/test_coarse_wgmma.py -m cuda -q -p no:cacheprovider -n 12 --tb=short \
  > "$OUT/pytest_wgmma.log" 2>&1; tail -3 "$OUT/pytest_wgmma.log"
grep -E "^(FAILED|ERROR)" "$OUT/pytest_wgmma.log" | head -20
