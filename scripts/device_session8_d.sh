#!/usr/bin/env bash
# Eighth session, closing GPU call: the full cuda tier on the final tree, then the draft head on
# the real model's hidden states (needs .realhead/ from scripts/real_head_data.py, carried).
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 260 python3 -m pytest -m "cuda and not slow" -q -p no:cacheprovider --timeout=300 -n 8 \
  > "$OUT/pytest_cuda.log" 2>&1; tail -6 "$OUT/pytest_cuda.log"
timeout 200 python3 scripts/bench_certified_real.py .realhead/smollm2_head.pt.xz --json "$OUT/real_head.json" \
  > "$OUT/real_head.log" 2>&1; cat "$OUT/real_head.log"
