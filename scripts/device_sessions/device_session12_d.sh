#!/usr/bin/env bash
# Twelfth session, fourth GPU call: the decode GEMV's register double buffer unrolled twice
# (mma_gemv STAGES 0: no register moves between blocks, ~11% fewer instructions a tile, but
# 72 -> 101 / 124 -> 164 registers at M = 1 / 16 offline) against the shipped loop, same run.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 150 python3 -m pytest -m "cuda and not slow" -q -p no:cacheprovider --timeout=300 -n 8 \
  tests/ops/test_mma_gemv.py tests/ops/test_fp4_gemm.py tests/ops/test_fp8_gemm.py > "$OUT/pytest_cuda_d.log" 2>&1
tail -1 "$OUT/pytest_cuda_d.log"; grep -E "^FAILED|^ERROR" "$OUT/pytest_cuda_d.log" | head
for m in 1 16; do
  dec=e4m3; [ $m = 16 ] && dec=f16
  timeout 150 python3 scripts/bench_mma_gemv.py --ops fp4 --ms $m --decodes $dec --configs "" --stages 1,0 \
    --json "$OUT/pingpong_m$m.json" > "$OUT/pingpong_m$m.log" 2>&1
done
python3 - "$OUT"/pingpong_m1.log "$OUT"/pingpong_m16.log <<'PY'
import json, sys
for f in sys.argv[1:]:
    for line in open(f):
        if line.startswith("{") and '"op"' in line:
            r = json.loads(line)
            keys = sorted(k for k in r if k.startswith("mma_") and (k.endswith("_us") or "same_bits" in k))
            print(r["M"], r["N"], r["K"], "rowwise", r.get("scaled_mm_fp8_rowwise_us"), " ".join(f"{k[4:]}={r[k]}" for k in keys))
PY
