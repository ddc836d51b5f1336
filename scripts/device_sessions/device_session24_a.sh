#!/usr/bin/env bash
# Session 24, call a: the bare gathered read in the registered bench's timer (is 2x of #8's floor
# reachable on the shapes that miss it?), then the fp4 / act_quant / fp8 GEMV cuda tests left unrun
# by session 23 (its call g). Results under $OUT.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 250 python3 scripts/probe_gathered_floor.py --json "$OUT/gathered_floor.json" > "$OUT/gathered_floor.log" 2>&1
python3 - "$OUT/gathered_floor.json" <<'PY' || tail -5 "$OUT/gathered_floor.log"
import json, sys
rows = json.load(open(sys.argv[1]))
print(rows[0])
for r in rows[1:]:
    print(f"{r['case']:16s} floor {r['floor_us']:5.2f}  gathered {r['gathered_bias_us']:6.2f} ({r['gathered_x_floor']:.2f}x)  read {r['best_read_us']:6.2f} ({r['read_x_floor']:.2f}x) {r['best_read']}")
PY
timeout 150 python3 -m pytest tests/ops/test_fp4_gemm.py tests/ops/test_act_quant.py tests/ops/test_fp8_wgmma_gemv.py -m cuda -q -p no:cacheprovider -n 4 --tb=short \
  > "$OUT/pytest_fp4.log" 2>&1; tail -4 "$OUT/pytest_fp4.log"
