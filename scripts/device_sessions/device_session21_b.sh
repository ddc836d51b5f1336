#!/usr/bin/env bash
# Session 21, call b (#9): the stream-K FP8 decode GEMV -- its cuda tests, then a same-run sweep of its
# configs against the shipped fp8_gemm dispatch and _scaled_mm on the five benchmark shapes at
# M = 1, 16, 64 (layer-stack timer). Results under $OUT.
# (The stream-K GEMV, its tests and sweep script were removed after these calls; they run at commit 07010ad.)
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 120 python3 -m pytest tests/ops/test_fp8_streamk_gemv.py -m cuda -q -p no:cacheprovider --tb=line > "$OUT/pytest_streamk.log" 2>&1
tail -30 "$OUT/pytest_streamk.log"
timeout 330 python3 scripts/bench_fp8_streamk_gemv.py --ms 1,16,64 --json "$OUT/streamk.json" > "$OUT/streamk.log" 2>&1
python3 - "$OUT/streamk.log" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    try: r = json.loads(line)
    except ValueError: print(line.rstrip()[:300]); continue
    if "M" not in r: print(r); continue
    sk = {k[3:-3]: v for k, v in r.items() if k.startswith("sk_") and k.endswith("_us")}
    errs = max((v for k, v in r.items() if k.endswith("_err")), default=None)
    print(f'M{r["M"]} N{r["N"]} K{r["K"]} floor {r["floor_us"]} shipped {r["shipped_us"]} ({r["shipped_x_floor"]}x) '
          f'tensor {r["tensor_us"]} best {r.get("best")} {r.get("best_x_floor")}x maxerr {errs:.2e} | ' + " ".join(f"{k}={v}" for k, v in sk.items()))
PY
