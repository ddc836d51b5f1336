#!/usr/bin/env bash
# Tenth session, third GPU call: the fused certified argmax after its statistics / reset atomics
# went relaxed (one acq_rel atomic left, the ticket) and its verdict loads went to one round
# trip: swept over maxnreg / stages / M tiles next to cuBLAS + argmax (same run); the fastest
# exact configuration per M band then times the real-model benchmark (certified, fast, cuBLAS,
# exactness over all 8192 positions); then the full cuda tier. Needs .realhead/ (carried).
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 220 python3 scripts/probe_wide_m.py .realhead/smollm2_head.pt.xz --fused --ms 4,16,32,64 \
  --json "$OUT/probe_fused.json" --pick "$OUT/fused_configs.json" > "$OUT/probe_fused.log" 2>&1
grep -E '"stage"|failed|Error|agreement vs fp64": 0' "$OUT/probe_fused.log" | head -60
cat "$OUT/fused_configs.json" | tr -d ' \n'; echo
pick=(); [ -s "$OUT/fused_configs.json" ] && pick=(--fused-configs "$OUT/fused_configs.json")
timeout 200 python3 scripts/bench_certified_real.py .realhead/smollm2_head.pt.xz "${pick[@]}" \
  --json "$OUT/real_head.json" > "$OUT/real_head.log" 2>&1
grep -E "graph|agree|Error" "$OUT/real_head.log" | head -40
timeout 270 python3 -m pytest -m "cuda and not slow" -q -p no:cacheprovider --timeout=300 -n 8 \
  > "$OUT/pytest_cuda.log" 2>&1; tail -3 "$OUT/pytest_cuda.log"
