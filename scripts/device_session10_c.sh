#!/usr/bin/env bash
# Tenth session, third GPU call: the fused certified argmax after its statistics / reset atomics
# went relaxed (one acq_rel atomic left, the ticket) and its verdict loads went to one round
# trip, swept over maxnreg / stages / M tiles next to cuBLAS + argmax (same run); the head's
# fused and certified cuda tests. Needs .realhead/ (carried). Results under $OUT.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 240 python3 scripts/probe_wide_m.py .realhead/smollm2_head.pt.xz --fused --ms 4,16,32,64 \
  --json "$OUT/probe_fused.json" > "$OUT/probe_fused.log" 2>&1
grep -E '"stage"|failed|Error|agreement vs fp64": 0' "$OUT/probe_fused.log" | head -60
timeout 150 python3 -m pytest -m "cuda and not slow" -q -p no:cacheprovider --timeout=300 -n 8 \
  tests/nn/test_draft_head.py tests/ops/test_coarse_head.py > "$OUT/pytest_cuda_head.log" 2>&1
tail -2 "$OUT/pytest_cuda_head.log"
