#!/usr/bin/env bash
# Twelfth session, second GPU call: the cp.async-staged FP4 decode GEMV (Gluon,
# lowbit/ops/fp8_gemm/gluon_gemv.py) — its cuda tests (bit identity with mma_gemv), then the
# same-run A/B against the register-fed kernel and row-wise _scaled_mm at M = 1 (e4m3) and 16 (f16).
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 200 python3 -m pytest -m "cuda and not slow" -q -p no:cacheprovider --timeout=300 \
  tests/ops/test_gluon_gemv.py > "$OUT/pytest_gluon_gemv.log" 2>&1
tail -3 "$OUT/pytest_gluon_gemv.log"; grep -E "^FAILED|^ERROR|Error|assert" "$OUT/pytest_gluon_gemv.log" | head -20
G=1x2x3,1x2x4,1x4x3,1x4x4,1x8x3,2x4x3
for m in 1 16; do
  dec=e4m3; [ $m = 16 ] && dec=f16
  timeout 200 python3 scripts/bench_mma_gemv.py --ops fp4 --ms $m --decodes $dec --configs "" --gluon $G \
    --json "$OUT/gluon_gemv_m$m.json" > "$OUT/gluon_gemv_m$m.log" 2>&1
  tail -2 "$OUT/gluon_gemv_m$m.log" | grep -v '^{' | head -3
done
python3 - "$OUT"/gluon_gemv_m1.log "$OUT"/gluon_gemv_m16.log <<'PY'
import json, sys
for f in sys.argv[1:]:
    for line in open(f):
        if line.startswith("{") and '"op"' in line:
            r = json.loads(line)
            g = {k[6:-3]: r[k] for k in r if k.startswith("gluon_") and k.endswith("_us")}
            bad = [k for k in r if k.endswith("_same_bits") and not r[k]]
            reg = [r[k] for k in r if k.startswith("mma_") and k.endswith("_us")]
            print(r["M"], r["N"], r["K"], "rowwise", r.get("scaled_mm_fp8_rowwise_us"), "reg", reg, "best", r["best"],
                  r["best_vs_rowwise"], "MISMATCH" if bad else "", " ".join(f"{k}={v}" for k, v in g.items()))
PY
