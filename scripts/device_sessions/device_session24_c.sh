#!/usr/bin/env bash
# Session 24, call c: (1) session 23's prepared re-encoding A/B (the word-parallel path, expand.SWAR,
# against the per-code kernel; fused vs re-encode + FP8 GEMM at M = 256..4096); (2) the bare
# gathered read on the four shapes where it exceeds 2x of #8's floor, also over consecutive rows;
# (3) fp8_gemm's registered bench (session 23 saw M = 512 slower there than in bench_fp4_expand).
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 200 python3 scripts/bench_fp4_expand.py --swar on --ms 256,512,1024,4096 --json "$OUT/fp4_expand.json" \
  > "$OUT/fp4_expand.log" 2>&1; cat "$OUT/fp4_expand.log" | tail -30
timeout 120 python3 scripts/probe_gathered_floor.py --contig --json "$OUT/gathered_contig.json" \
  --cases "K1024 B256 T32,K1024 B256 T64,K4096 B64 T32,K4096 B64 T64,K4096 B256 T8,K4096 B16 T64" > "$OUT/gathered_contig.log" 2>&1
python3 - "$OUT/gathered_contig.json" <<'PY' || tail -5 "$OUT/gathered_contig.log"
import json, sys
rows = json.load(open(sys.argv[1]))
print(rows[0])
for r in rows[1:]:
    t = r["times"]
    print(f"{r['case']:16s} floor {r['floor_us']:5.2f}  gathered {r['gathered_bias_us']:6.2f} ({r['gathered_x_floor']:.2f}x)  "
          f"read {r['best_read_us']:6.2f} ({r['read_x_floor']:.2f}x)  contiguous read {t[t['best_contig']]:6.2f} ({t['contig_x_floor']:.2f}x)")
PY
timeout 170 python3 -m lowbit.cli bench --op fp8_gemm --out "$OUT/fp8" > "$OUT/bench_fp8.log" 2>&1
grep -E "M512|M4096" "$OUT/bench_fp8.log" | head -40
