#!/usr/bin/env bash
# Eighth session, first and fourth GPU calls (logs ..._session8_a_* and ..._session8_d_*): the
# full cuda tier, then the draft head on the real model's hidden states, eager and
# graph-replayed (needs .realhead/ from scripts/real_head_data.py, carried). Results under $OUT.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 240 python3 -m pytest -m "cuda and not slow" -q -p no:cacheprovider --timeout=300 -n 8 \
  > "$OUT/pytest_cuda.log" 2>&1; tail -15 "$OUT/pytest_cuda.log"
timeout 300 python3 scripts/bench_certified_real.py .realhead/smollm2_head.pt.xz --json "$OUT/real_head.json" \
  > "$OUT/real_head.log" 2>&1; cat "$OUT/real_head.log"
