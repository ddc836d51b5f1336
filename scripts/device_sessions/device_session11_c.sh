#!/usr/bin/env bash
# Eleventh session, third GPU call: where the decode GEMV and the coarse pass wait. Nsight
# Compute (full set, per-instruction stall sampling) of the FP4 GEMV at M = 1 / 16 on N24576 K1536
# (the shape furthest from its target) and of the draft head's INT2 coarse pass at M = 1; then a
# register-cap sweep of the FP4 GEMV at M = 16 (fewer registers: more programs per SM, one wave).
# The caps spilled and lost everywhere; the config option was removed after this call (commit
# 3d2bc9b has it).
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
prof() {  # name, kernel regex, profile_decode.py arguments...
  local name=$1 kre=$2; shift 2
  timeout 120 ncu -k "regex:$kre" --launch-skip 2 --launch-count 1 --set full --import-source no -f \
    -o "$OUT/$name" python3 scripts/profile_decode.py "$@" > "$OUT/${name}_run.log" 2>&1
  ncu -i "$OUT/$name.ncu-rep" --page details --print-details all > "$OUT/${name}_details.txt" 2>&1
  ncu -i "$OUT/$name.ncu-rep" --page source --csv --print-source sass > "$OUT/${name}_sass.csv" 2>&1
  rm -f "$OUT/$name.ncu-rep" "$OUT/${name}_run.log"
  grep -E "Duration|Registers Per|Achieved Occ|Warp Cycles Per Issued|Stall|Issued Warp" "$OUT/${name}_details.txt" | head -12
  wc -c "$OUT/${name}_sass.csv"; head -c 300 "$OUT/${name}_sass.csv"; echo
}
prof fp4_m1 mma_gemv gemv fp4 1 24576 1536 1 2
prof fp4_m16 mma_gemv gemv fp4 16 24576 1536 1 2
prof int2_m1 coarse_mma head 2 1
timeout 120 python3 scripts/bench_mma_gemv.py --ops fp4 --ms 16 --decodes f16 \
  --configs 1x2x96,1x2x80,1x4x96,1x4x80,1x8x96,1x8x80,2x4x128 --json "$OUT/mma_gemv_caps.json" > "$OUT/mma_gemv_caps.log" 2>&1
python3 - "$OUT/mma_gemv_caps.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1])):
    if "op" not in r:
        continue
    keys = sorted(k for k in r if k.startswith("mma_") and k.endswith("_us"))
    print(r["M"], r["N"], r["K"], "rowwise", r.get("scaled_mm_fp8_rowwise_us"), "best", r["best"], r["best_vs_rowwise"],
          " ".join(f"{k[4:-3]}={r[k]}" for k in keys))
PY
tail -2 "$OUT/mma_gemv_caps.log"
