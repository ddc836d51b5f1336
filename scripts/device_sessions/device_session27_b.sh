#!/usr/bin/env bash
# Twenty-seventh session, call b: programs spanning two candidate blocks (gluon_wgmma.SPAN) --
# the GPU tests of the new launch (both kernels, per group and whole-row, persistent), then fast
# argmax on 124160 x 5120 against the shipped dispatch at M = 1..64.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 300 python3 -m pytest tests/ops/test_coarse_wgmma.py -m cuda -q -p no:cacheprovider -n 8 --tb=short \
  > "$OUT/pytest_span.log" 2>&1; tail -3 "$OUT/pytest_span.log"
grep -E "^(FAILED|ERROR)" "$OUT/pytest_span.log" | head -20
timeout 300 python3 scripts/bench_coarse_wgmma.py --bits 2,4 --ms 1,16,32,64 --no-previous \
  --paths "default,span,span single,span ws,span s3" --json "$OUT/head_span.json" > "$OUT/head_span.log" 2>&1
cut -c1-230 "$OUT/head_span.log"
