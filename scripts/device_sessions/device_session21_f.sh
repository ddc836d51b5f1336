#!/usr/bin/env bash
# Session 21, call f (#8): the final gathered dispatch (PDL, the trigger rule, SPLIT everywhere, RT = 2
# with the RT = 1 warps) -- the registered benchmark, then its cuda tests while device time lasts. Results under $OUT.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT" "$OUT/bench"
timeout 170 python3 -m lowbit.cli bench --op gathered_bias --out "$OUT/bench" > "$OUT/bench.log" 2>&1
python3 - "$OUT/bench/bench.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
n = 0
for r in d["results"]:
    if r["impl"] != "lowbit":
        continue
    of = r["extra"]["of_floor"]; n += of <= 2
    sp = r.get("speedup", {})
    print(f'{r["case"]:16s} {r["us"]:7.2f} us floor {r["floor_us"]:5.2f} x{of:5.2f} unfused {sp.get("unfused torch", 0):7.1f}x dequant-all {sp.get("dequant all + index", 0):7.1f}x')
print("within 2x:", n)
PY
timeout 60 python3 -m pytest tests/ops/test_gathered.py tests/ops/test_gathered_mma.py tests/nn/test_markov.py \
  -m cuda -q -p no:cacheprovider -n 4 --tb=short > "$OUT/pytest.log" 2>&1; tail -3 "$OUT/pytest.log"
