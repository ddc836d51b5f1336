#!/usr/bin/env bash
# Tenth session, last GPU call: the fused argmax with the M-tile count as a runtime argument
# (specialised at 1; one kernel for every band-64 M): its cuda tests, and the real-model
# benchmark at M = 32 / 64. Needs .realhead/ (carried). Results under $OUT.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 100 python3 -m pytest -m "cuda and not slow" -q -p no:cacheprovider --timeout=300 -n 8 \
  tests/nn/test_draft_head.py -k "fused or certified" > "$OUT/pytest_cuda_fused.log" 2>&1
tail -2 "$OUT/pytest_cuda_fused.log"
timeout 120 python3 scripts/bench_certified_real.py .realhead/smollm2_head.pt.xz --ms 32,64 \
  --json "$OUT/real_head.json" > "$OUT/real_head.log" 2>&1
grep -E '"certified int8 g64 \(default\)"|cuBLAS|exactness|Error' "$OUT/real_head.log" | head -20
