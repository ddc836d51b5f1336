#!/usr/bin/env bash
# Ninth session, GPU call 1: the draft-head / coarse-head cuda tests (the fused certified argmax
# included: compile, CUDA graph), the fused argmax's launch configurations on SmolLM2's head,
# and the real-head benchmark (needs .realhead/ from scripts/real_head_data.py, carried).
# Results under $OUT.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
DATA=.realhead/smollm2_head.pt.xz
timeout 200 python3 -m pytest -m "cuda and not slow" -q -p no:cacheprovider --timeout=300 -n 8 \
  tests/ops/test_coarse_head.py tests/nn/test_draft_head.py > "$OUT/pytest_cuda_head.log" 2>&1
tail -5 "$OUT/pytest_cuda_head.log"
timeout 120 python3 scripts/probe_wide_m.py "$DATA" --fused --ms 1,4,16,32,64 --json "$OUT/probe_fused.json" \
  > "$OUT/probe_fused.log" 2>&1; grep -v "agreement" "$OUT/probe_fused.log"; grep "agreement" "$OUT/probe_fused.log" | head -3
timeout 240 python3 scripts/bench_certified_real.py "$DATA" --json "$OUT/real_head.json" > "$OUT/real_head.log" 2>&1
cat "$OUT/real_head.log"
