#!/usr/bin/env bash
# Prepared in session 23 after its last device call (not run): the fp4 cuda tests after the session's
# last changes (the dispatch test's new spy; the re-encoding kernel restructured, its word-parallel
# path added behind expand.SWAR, off), then the prefill A/B: the fused kernel against the re-encode +
# FP8 GEMM path, the re-encoding timed with the word-parallel path on (reencode_us, run with SWAR on
# below) and off (reencode_percode_us). If the word-parallel path is faster, turn expand.SWAR on and
# re-pick fp4_gemm.triton.EXPAND_MIN_M from expand_us vs fused_us. Last, fp8_gemm's registered bench
# (an M = 512 anomaly to check). Results under $OUT.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 150 python3 -m pytest tests/ops/test_fp4_gemm.py tests/ops/test_act_quant.py tests/ops/test_fp8_wgmma_gemv.py -m cuda -q -p no:cacheprovider -n 4 --tb=short \
  > "$OUT/pytest_fp4.log" 2>&1; tail -4 "$OUT/pytest_fp4.log"
timeout 200 python3 scripts/bench_fp4_expand.py --swar on --ms 256,512,1024,4096 --json "$OUT/fp4_expand.json" \
  > "$OUT/fp4_expand.log" 2>&1; cat "$OUT/fp4_expand.log"
# fp8_gemm at M = 512 took 62.5 / 45.9 us on N4096 K7168 / N7168 K2048 in session 23's registered
# bench but 28.9 / 20.8 us in bench_fp4_expand.py: the registered bench again, to see whether it repeats
timeout 150 python3 -m lowbit.cli bench --op fp8_gemm --out "$OUT/fp8" > "$OUT/bench_fp8.log" 2>&1
grep -E "M512|M4096" "$OUT/bench_fp8.log" | head -40
