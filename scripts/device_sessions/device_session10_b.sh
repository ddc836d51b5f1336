#!/usr/bin/env bash
# Tenth session, second GPU call: the fused certified argmax with parts of its epilogue cut
# (fused_argmax.PROBE_CUT: where the time over a bare tl.dot pass goes) and a few more launch
# shapes, next to cuBLAS + argmax and the bare probe pass, same run; then the full cuda tier.
# Needs .realhead/ (carried). Results under $OUT.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 240 python3 scripts/probe_wide_m.py .realhead/smollm2_head.pt.xz --fused --ms 16,32,64 \
  --json "$OUT/probe_fused.json" > "$OUT/probe_fused.log" 2>&1
grep -E '"stage"|failed|Error' "$OUT/probe_fused.log" | head -60
timeout 270 python3 -m pytest -m "cuda and not slow" -q -p no:cacheprovider --timeout=300 -n 8 \
  > "$OUT/pytest_cuda.log" 2>&1; tail -4 "$OUT/pytest_cuda.log"
