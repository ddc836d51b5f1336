#!/usr/bin/env bash
# Session 21, call d: (#8) the gathered NVFP4 kernel as a programmatic dependent launch -- its cuda tests
# (PDL variants bit-identical, inputs written right before it in a graph) and a same-run A/B of PDL /
# no PDL / PDL + early trigger on all 36 shapes; (#9) where the stream-K GEMV's M = 64 time goes with
# taller units (128 / 256 weight rows: less activation traffic from L2), reduction off (MODE 2).
# (The stream-K GEMV, its tests and sweep script were removed after these calls; they run at commit 07010ad.)
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT" "$OUT/ab"
timeout 120 python3 -m pytest tests/ops/test_gathered.py tests/ops/test_gathered_mma.py tests/nn/test_markov.py \
  tests/ops/test_fp8_streamk_gemv.py -m cuda -q -p no:cacheprovider -n 4 --tb=short > "$OUT/pytest.log" 2>&1; tail -15 "$OUT/pytest.log"
OUT="$OUT/ab" timeout 150 python3 scripts/bench_gathered_mma.py --picked --variants nopdl,trigger --rep 25 > "$OUT/ab.log" 2>&1; cat "$OUT/ab.log"
timeout 150 python3 scripts/bench_fp8_streamk_gemv.py --shapes 7168:16384,4096:7168 --ms 64,16 --json "$OUT/streamk_tall.json" \
  --configs p2s4w4m2,p1s4w8m2,p1s6w8m2,p1s3w16m2,p1s4w16m2,p1s4w8m1,p1s6w8m1 > "$OUT/streamk_tall.log" 2>&1
python3 - "$OUT/streamk_tall.log" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    try: r = json.loads(line)
    except ValueError: print(line.rstrip()[:300]); continue
    if "M" not in r: print(r); continue
    sk = {k[3:-3]: v for k, v in r.items() if k.startswith("sk_") and k.endswith("_us")}
    print(f'M{r["M"]} N{r["N"]} K{r["K"]} floor {r["floor_us"]} shipped {r["shipped_us"]} ({r["shipped_x_floor"]}x) '
          f'tensor {r["tensor_us"]} | ' + " ".join(f"{k}={v}" for k, v in sk.items()))
    for k, v in r.items():
        if k.endswith("_error"): print("   ", k, v[:120])
PY
