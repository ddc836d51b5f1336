#!/usr/bin/env bash
# Eighth session, second and third GPU calls (logs ..._session8_b_* and ..._session8_c_*):
# coarse-head / draft-head cuda tests, the certified call's stages, and the real-head benchmark.
# Results under $OUT.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 200 python3 -m pytest -m "cuda and not slow" -q -p no:cacheprovider --timeout=300 -n 8 \
  tests/ops/test_coarse_head.py tests/nn/test_draft_head.py > "$OUT/pytest_cuda_head.log" 2>&1
tail -5 "$OUT/pytest_cuda_head.log"
timeout 150 python3 scripts/profile_certified_stages.py .realhead/smollm2_head.pt.xz --json "$OUT/stages.json" \
  > "$OUT/stages.log" 2>&1; cat "$OUT/stages.log"
timeout 200 python3 scripts/bench_certified_real.py .realhead/smollm2_head.pt.xz --json "$OUT/real_head.json" \
  > "$OUT/real_head.log" 2>&1; cat "$OUT/real_head.log"
