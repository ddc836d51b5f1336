#!/usr/bin/env bash
# Eleventh session, last GPU call (about 3 minutes of device time were left): the decode GEMV's K
# loop through Triton's software pipeliner (STAGES 3: cp.async into shared memory, blocks in
# flight without registers) against the register double buffer, on the picked configs at M = 1
# (E4M3 decode) and M = 16 (fp16 decode), same run as the _scaled_mm baselines; bit-identity of the
# two schedules checked on every shape.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 75 python3 scripts/bench_mma_gemv.py --ops fp4 --ms 1 --decodes e4m3 --configs "" --stages 1,3 \
  --json "$OUT/mma_gemv_stages_m1.json" > "$OUT/mma_gemv_stages_m1.log" 2>&1
timeout 75 python3 scripts/bench_mma_gemv.py --ops fp4 --ms 16 --decodes f16 --configs "" --stages 1,3 \
  --json "$OUT/mma_gemv_stages_m16.json" > "$OUT/mma_gemv_stages_m16.log" 2>&1
python3 - "$OUT"/mma_gemv_stages_m1.log "$OUT"/mma_gemv_stages_m16.log <<'PY'
import json, sys
for f in sys.argv[1:]:
    for line in open(f):
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        if "op" not in r:
            continue
        keys = sorted(k for k in r if k.startswith("mma_") and (k.endswith("_us") or k.endswith("stages")))
        print(r["M"], r["N"], r["K"], "rowwise", r.get("scaled_mm_fp8_rowwise_us"), "best", r.get("best"),
              r.get("best_vs_rowwise"), " ".join(f"{k[4:]}={r[k]}" for k in keys))
PY
