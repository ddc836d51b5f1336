#!/usr/bin/env bash
# Session 24, call g: fp4_gemm's registered bench on the final dispatch (the re-encode path from
# M = 512 where M N K >= 2^33, no host read). Results under $OUT.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 190 python3 -m lowbit.cli bench --op fp4_gemm --out "$OUT/fp4" > "$OUT/bench_fp4.log" 2>&1
grep -E "M512|M4096" "$OUT/bench_fp4.log" | grep -E "lowbit|rowwise" | head -30; tail -3 "$OUT/bench_fp4.log"
