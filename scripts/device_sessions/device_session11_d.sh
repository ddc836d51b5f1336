#!/usr/bin/env bash
# Eleventh session, fourth GPU call: two K blocks in flight per warp in the decode GEMV (DEPTH 2,
# a second register buffer) against one, at M = 1 / 16 on the five shapes, same run as the
# _scaled_mm baselines; the GEMV's cuda tests first. DEPTH 2 lost everywhere and was removed
# after this call; the code it ran is commit 9b31103 (docs/gemm.md, "eleventh session").
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 120 python3 -m pytest -m "cuda and not slow" -q -p no:cacheprovider --timeout=300 -n 8 \
  tests/ops/test_mma_gemv.py tests/ops/test_fp4_gemm.py tests/ops/test_fp8_gemm.py > "$OUT/pytest_cuda_d.log" 2>&1
tail -1 "$OUT/pytest_cuda_d.log"; grep -E "^FAILED|^ERROR" "$OUT/pytest_cuda_d.log" | head
timeout 120 python3 scripts/bench_mma_gemv.py --ops fp4 --ms 1 --decodes e4m3 \
  --configs 1x2x2,1x4x2,1x8x2,2x4x2,2x8x2 --json "$OUT/mma_gemv_depth_m1.json" > "$OUT/mma_gemv_depth_m1.log" 2>&1
timeout 150 python3 scripts/bench_mma_gemv.py --ops fp4 --ms 16 --decodes f16 \
  --configs 1x2x2,1x4x2,1x8x2,2x2x2,2x4x2 --json "$OUT/mma_gemv_depth_m16.json" > "$OUT/mma_gemv_depth_m16.log" 2>&1
python3 - "$OUT/mma_gemv_depth_m1.json" "$OUT/mma_gemv_depth_m16.json" <<'PY'
import json, sys
for f in sys.argv[1:]:
    for r in json.load(open(f)):
        if "op" not in r:
            continue
        keys = sorted(k for k in r if k.startswith("mma_") and k.endswith("_us"))
        print(r["M"], r["N"], r["K"], "rowwise", r.get("scaled_mm_fp8_rowwise_us"), "best", r["best"], r["best_vs_rowwise"],
              " ".join(f"{k[4:-3]}={r[k]}" for k in keys))
PY
tail -1 "$OUT/mma_gemv_depth_m16.log" | cut -c1-300
