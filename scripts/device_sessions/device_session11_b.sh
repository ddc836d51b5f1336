#!/usr/bin/env bash
# Eleventh session, second GPU call: L2 prefetch hints (prefetch.global.L2, no registers) in the
# two latency-bound tensor-core streams — the decode GEMV (fp4 / fp8, distances 0 / 1 / 2 / 4)
# and the draft head's coarse pass (PF_L2 on both K-loop schedules) — after their cuda tests.
# The hints lost or tied everywhere that matters and were removed after this call; the code it ran
# is commit 3ccb9ff (docs/gemm.md, "eleventh session").
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 150 python3 -m pytest -m "cuda and not slow" -q -p no:cacheprovider --timeout=300 -n 8 \
  tests/ops/test_mma_gemv.py tests/ops/test_coarse_head.py tests/ops/test_fp4_gemm.py > "$OUT/pytest_cuda_b.log" 2>&1
tail -2 "$OUT/pytest_cuda_b.log"; grep -E "^FAILED|^ERROR" "$OUT/pytest_cuda_b.log" | head
timeout 150 python3 scripts/bench_mma_gemv.py --ops fp4 --ms 1,16 --configs "" --decodes f16 \
  --prefetches 0,1,2,4 --json "$OUT/mma_gemv_l2.json" > "$OUT/mma_gemv_l2.log" 2>&1
timeout 60 python3 scripts/bench_mma_gemv.py --ops fp8 --ms 1 --configs "" --prefetches 0,1,2,4 \
  --json "$OUT/mma_gemv_l2_fp8.json" > "$OUT/mma_gemv_l2_fp8.log" 2>&1
python3 - "$OUT/mma_gemv_l2.json" "$OUT/mma_gemv_l2_fp8.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1])) + json.load(open(sys.argv[2])):
    if "op" not in r:
        print(r); continue
    keys = sorted(k for k in r if k.startswith("mma_") and k.endswith("_us"))
    print(r["op"], r["M"], r["N"], r["K"], "rowwise", r.get("scaled_mm_fp8_rowwise_us"), "tensor", r.get("scaled_mm_fp8_tensor_us"),
          "best", r["best"], r["best_vs_rowwise"], " ".join(f"{k[4:-3]}={r[k]}" for k in keys))
PY
tail -2 "$OUT/mma_gemv_l2.log"
timeout 200 python3 scripts/bench_coarse_ab.py --set l2 --ms 1,8,16 --bits 2,4,8 --json "$OUT/coarse_l2.json" \
  > "$OUT/coarse_l2.log" 2>&1
grep -v '^$' "$OUT/coarse_l2.log" | cut -c1-230 | tail -50
