#!/usr/bin/env bash
# Session 21, call c (#9): the stream-K FP8 decode GEMV with two reductions of shared tiles (MODE 0 the
# last to arrive, MODE 1 the tile's first CTA polling) -- its cuda tests (element-wise against the
# split-free wgmma GEMV), then where its time goes: MODE 2 (no reduction, wrong sums) and grids whose
# CTAs share no tile (g128 / g192 / g384 on N24576, g112 on N7168, g64 on N4096), against the shipped
# dispatch and _scaled_mm (layer-stack timer). Results under $OUT.
# (The stream-K GEMV, its tests and sweep script were removed after these calls; they run at commit 07010ad.)
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 150 python3 -m pytest tests/ops/test_fp8_streamk_gemv.py tests/ops/test_fp4_wgmma_gemv.py -m cuda -q -p no:cacheprovider --tb=line > "$OUT/pytest_streamk.log" 2>&1
tail -30 "$OUT/pytest_streamk.log"
timeout 360 python3 scripts/bench_fp8_streamk_gemv.py --ms 1,16,64 --json "$OUT/streamk.json" \
  --configs auto,p2s4w4,p2s4w4m1,p2s4w4m2,p1s8w4m1,p1s8w4m2,p2s6w4m1,p2s4w4g128,p2s4w4g192,p3s4w4g384,p1s8w4g112,p1s8w4g64 \
  > "$OUT/streamk.log" 2>&1
python3 - "$OUT/streamk.log" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    try: r = json.loads(line)
    except ValueError: print(line.rstrip()[:300]); continue
    if "M" not in r: print(r); continue
    sk = {k[3:-3]: v for k, v in r.items() if k.startswith("sk_") and k.endswith("_us")}
    errs = max((v for k, v in r.items() if k.endswith("_err")), default=float("nan"))
    print(f'M{r["M"]} N{r["N"]} K{r["K"]} floor {r["floor_us"]} shipped {r["shipped_us"]} ({r["shipped_x_floor"]}x) '
          f'tensor {r["tensor_us"]} best {r.get("best")} {r.get("best_x_floor")}x maxerr {errs:.2e} | ' + " ".join(f"{k}={v}" for k, v in sk.items()))
    for k, v in r.items():
        if k.endswith("_error"): print("   ", k, v[:120])
PY
