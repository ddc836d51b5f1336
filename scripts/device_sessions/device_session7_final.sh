#!/usr/bin/env bash
# Seventh session, closing GPU call: the full cuda tier, the draft head on the real model's hidden
# states (certified and fast vs cuBLAS; needs .realhead/ from scripts/real_head_data.py, carried),
# and the registry's quick draft-head benchmark. Results under $OUT.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 220 python3 -m pytest -m "cuda and not slow" -q -p no:cacheprovider --timeout=300 -n 8 \
  > "$OUT/pytest_cuda.log" 2>&1; tail -3 "$OUT/pytest_cuda.log"
timeout 150 python3 scripts/bench_certified_real.py .realhead/smollm2_head.pt.xz --json "$OUT/real_head.json" \
  > "$OUT/real_head.log" 2>&1; cat "$OUT/real_head.log"
timeout 200 python3 -m lowbit.cli bench --op draft_head --quick --out "$OUT/bench" > "$OUT/bench.log" 2>&1
tail -45 "$OUT/bench.log"
