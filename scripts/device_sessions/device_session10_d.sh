#!/usr/bin/env bash
# Tenth session, closing GPU call: the draft head's cuda tests with the fused argmax's new band-64
# default (two BM 32 tiles, 2 stages, 64 registers) and the one-tile BM 64 cases, then the
# real-model benchmark with the library's defaults. Needs .realhead/ (carried). Results under $OUT.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 150 python3 -m pytest -m "cuda and not slow" -q -p no:cacheprovider --timeout=300 -n 8 \
  tests/nn/test_draft_head.py tests/ops/test_coarse_head.py > "$OUT/pytest_cuda_head.log" 2>&1
tail -2 "$OUT/pytest_cuda_head.log"
timeout 200 python3 scripts/bench_certified_real.py .realhead/smollm2_head.pt.xz \
  --json "$OUT/real_head.json" > "$OUT/real_head.log" 2>&1
grep -E '"certified int8 g64 \(default\)"|cuBLAS|exactness|Error' "$OUT/real_head.log" | head -20
