#!/usr/bin/env bash
# Twelfth session, third GPU call: the decode GEMMs timed as a layer stack (8 distinct weights
# back to back in one graph after an L2 flush) next to the single-call cold_us numbers, lowbit
# and _scaled_mm alike (scripts/bench_gemm_stack.py); then the Gluon GEMV's e8m0 / NaN test again.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 400 python3 scripts/bench_gemm_stack.py --layers 8 --ms 1,16,64 --json "$OUT/gemm_stack.json" > "$OUT/gemm_stack.log" 2>&1
grep -v '^{' "$OUT/gemm_stack.log" | tail -3
python3 - "$OUT/gemm_stack.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))[1:]:
    print(r["op"], r["M"], r["N"], r["K"], "floor", r["floor_us"], "| stack: lowbit", r["lowbit_stack_us"], "rowwise",
          r["rowwise_stack_us"], "tensor", r["tensor_stack_us"], "x", r["vs_rowwise_stack"], "floor x", r["x_floor_stack"],
          "| single: lowbit", r["lowbit_single_us"], "rowwise", r["rowwise_single_us"], "x", r["vs_rowwise_single"])
PY
timeout 100 python3 -m pytest -m "cuda and not slow" -q -p no:cacheprovider --timeout=300 \
  tests/ops/test_gluon_gemv.py -k "nan or graph" 2>&1 | tail -2
