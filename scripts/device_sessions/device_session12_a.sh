#!/usr/bin/env bash
# Prepared in the eleventh session (no device time was left to run it): the first GPU call of the
# next one. Triton's software pipeliner as the K loop of the three latency-bound tensor-core
# streams — the decode GEMV (mma_gemv STAGES), the draft head's coarse pass (PREFETCH >= 2) and
# NVFP4 gathered_bias (PIPE) — each loop's loads become cp.async copies into shared memory, blocks
# in flight without the registers of today's register buffers (sm_90 offline: GEMV 70 -> 61 / 124
# -> 80 registers at M = 1 / 16, coarse INT2 128 -> 98, gathered K4096 98 -> 64). First their cuda
# tests (bit identity with the register buffers), then same-run A/Bs (the GEMV also over RT x W,
# since fewer registers move the best config). About 8 minutes.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 150 python3 -m pytest -m "cuda and not slow" -q -p no:cacheprovider --timeout=300 -n 8 \
  tests/ops/test_mma_gemv.py tests/ops/test_coarse_head.py tests/ops/test_gathered_mma.py > "$OUT/pytest_cuda.log" 2>&1
tail -1 "$OUT/pytest_cuda.log"; grep -E "^FAILED|^ERROR" "$OUT/pytest_cuda.log" | head
timeout 150 python3 scripts/bench_mma_gemv.py --ops fp4 --ms 1 --decodes e4m3 --stages 1,3,4 \
  --configs 1x2x3,1x4x3,1x8x3,2x4x3,2x8x3 \
  --json "$OUT/gemv_stages_m1.json" > "$OUT/gemv_stages_m1.log" 2>&1
timeout 150 python3 scripts/bench_mma_gemv.py --ops fp4 --ms 16 --decodes f16 --stages 1,3,4 \
  --configs 1x2x3,1x4x3,1x8x3,2x2x3,2x4x3 \
  --json "$OUT/gemv_stages_m16.json" > "$OUT/gemv_stages_m16.log" 2>&1
python3 - "$OUT"/gemv_stages_m1.log "$OUT"/gemv_stages_m16.log <<'PY'
import json, sys
for f in sys.argv[1:]:
    for line in open(f):
        if line.startswith("{") and '"op"' in line:
            r = json.loads(line)
            keys = sorted(k for k in r if k.startswith("mma_") and (k.endswith("_us") or k.endswith("stages")))
            print(r["M"], r["N"], r["K"], "rowwise", r.get("scaled_mm_fp8_rowwise_us"), "best", r.get("best"),
                  r.get("best_vs_rowwise"), " ".join(f"{k[4:]}={r[k]}" for k in keys))
PY
timeout 150 python3 scripts/bench_coarse_ab.py --set schedule --variants "table,p3 pipelined,p4 pipelined" \
  --ms 1,8,16 --json "$OUT/coarse_pipelined.json" > "$OUT/coarse_pipelined.log" 2>&1
grep -o '"M": [0-9]*, "bits": [0-9]*, "variant": "[^"]*", "coarse_us": [0-9.]*, "argmax_us": [0-9.]*' "$OUT/coarse_pipelined.log"
timeout 120 python3 scripts/bench_gathered_mma.py --picked --pipe 3,4 > "$OUT/gathered_pipe.log" 2>&1
grep -E "^K|MISMATCH" "$OUT/gathered_pipe.log" | head -40
