#!/usr/bin/env bash
# Tenth session, first GPU call: the draft head's cuda tests on the tree after the ninth
# session's refactors (BN in fused_argmax._CONFIGS, merged helpers, M tiles side by side in the
# grid), then the fused certified argmax's launch sweep on SmolLM2's head (M tiles below the
# band, BN 64, BK 32 / 128, one answer chunk at BM 64) next to cuBLAS + argmax, same run. Needs
# .realhead/ from scripts/real_head_data.py (carried). Results under $OUT.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 150 python3 -m pytest -m "cuda and not slow" -q -p no:cacheprovider --timeout=300 -n 8 \
  tests/nn/test_draft_head.py tests/ops/test_coarse_head.py > "$OUT/pytest_cuda_head.log" 2>&1
tail -3 "$OUT/pytest_cuda_head.log"
timeout 300 python3 scripts/probe_wide_m.py .realhead/smollm2_head.pt.xz --fused --ms 4,16,32,64 \
  --json "$OUT/probe_fused.json" > "$OUT/probe_fused.log" 2>&1
grep -E '"stage"|failed|Error' "$OUT/probe_fused.log" | head -60
