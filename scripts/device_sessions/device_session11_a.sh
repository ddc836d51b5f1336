#!/usr/bin/env bash
# Eleventh session, first GPU call: the full cuda tier (the tenth session's per-device state mend
# and the new FP4 decode straight to fp16), then the decode GEMV's FP4 A/B (fp16 decode by
# integer ops + prmt vs the E4M3 re-encoding + F2FP) over RT x W at M = 1 / 16 with the
# row-wise / per-tensor _scaled_mm baselines in the same run. Results under $OUT.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv > "$OUT/gpu.txt" 2>&1
timeout 300 python3 -m pytest -m "cuda and not slow" -q -p no:cacheprovider --timeout=300 -n 8 \
  > "$OUT/pytest_cuda.log" 2>&1
tail -3 "$OUT/pytest_cuda.log"
grep -E "^FAILED|^ERROR" "$OUT/pytest_cuda.log" | head -20
timeout 240 python3 scripts/bench_mma_gemv.py --ops fp4 --ms 1,16 --configs 1x2,1x4,1x8,2x4,2x8 \
  --json "$OUT/mma_gemv_decode_ab.json" > "$OUT/mma_gemv_decode_ab.log" 2>&1
python3 - "$OUT/mma_gemv_decode_ab.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1])):
    if "op" not in r:
        print(r); continue
    keys = sorted(k for k in r if k.startswith("mma_") and k.endswith("_us"))
    print(r["M"], r["N"], r["K"], "floor", r["floor_us"], "rowwise", r.get("scaled_mm_fp8_rowwise_us"),
          "best", r["best"], "best_vs_rowwise", r["best_vs_rowwise"],
          " ".join(f"{k[4:-3]}={r[k]}" for k in keys),
          "same_bits", all(v for k, v in r.items() if k.endswith("_same_bits")))
PY
tail -3 "$OUT/mma_gemv_decode_ab.log"
