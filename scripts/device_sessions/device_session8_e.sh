#!/usr/bin/env bash
# Eighth session, closing GPU call: the full cuda tier on the final tree, the certified call's
# stages and the real-head benchmark (needs .realhead/ from scripts/real_head_data.py, carried),
# then the registry's quick draft-head benchmark (big random head). Results under $OUT.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 240 python3 -m pytest -m "cuda and not slow" -q -p no:cacheprovider --timeout=300 -n 8 \
  > "$OUT/pytest_cuda.log" 2>&1; tail -4 "$OUT/pytest_cuda.log"
timeout 100 python3 scripts/profile_certified_stages.py .realhead/smollm2_head.pt.xz --ms 1,4,16 \
  --json "$OUT/stages.json" > "$OUT/stages.log" 2>&1; cat "$OUT/stages.log"
timeout 150 python3 scripts/bench_certified_real.py .realhead/smollm2_head.pt.xz --json "$OUT/real_head.json" \
  > "$OUT/real_head.log" 2>&1; cat "$OUT/real_head.log"
timeout 110 python3 -m lowbit.cli bench --op draft_head --quick --out "$OUT/bench" > "$OUT/bench.log" 2>&1
tail -30 "$OUT/bench.log"
