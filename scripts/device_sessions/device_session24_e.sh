#!/usr/bin/env bash
# Session 24, call e: fp4_gemm's re-encode path without the host read (the fused kernel follows the
# FP8 GEMM as a guarded launch that computes only for a weight the re-encoding flagged): the fp4 cuda
# tests, then the fused kernel against the path at M = 256..4096 (cold L2) to re-pick the size rule.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 200 python3 -m pytest tests/ops/test_fp4_gemm.py tests/ops/test_fp8_gemm.py -m cuda -q -p no:cacheprovider -n 4 --tb=short \
  > "$OUT/pytest_fp4.log" 2>&1; tail -6 "$OUT/pytest_fp4.log"
timeout 200 python3 scripts/bench_fp4_expand.py --ms 256,512,1024,4096 --json "$OUT/fp4_expand.json" > "$OUT/fp4_expand.log" 2>&1
python3 - "$OUT/fp4_expand.json" <<'PY' || tail -5 "$OUT/fp4_expand.log"
import json, sys
for r in json.load(open(sys.argv[1])):
    if "M" in r:
        print(f"M{r['M']:5d} N{r['N']:6d} K{r['K']:6d} MNK {r['M']*r['N']*r['K']/2**34:6.2f}x2^34  fused {r['fused_us']:8.1f}  path {r['expand_us']:8.1f}  "
              f"reencode {r['reencode_us']:6.1f}  fp8 {r['fp8_gemm_us']:7.1f}  speedup {r['speedup']:.2f}")
PY
