#!/usr/bin/env bash
# Prepared in session 22, not run (device time spent); the second half of call g (a call is at most
# 600 s): the PDL switches prepared for fp8_gemm's wgmma GEMV and for act_quant. Results under $OUT.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
# the fp8 wgmma GEMV (fp8_gemm at M = 9..16) as a programmatic dependent launch (prepared, off):
# its cuda test, then the layer stack at M = 16 / 32 / 64 with --variants default,wgpdl,wg64pdl (the
# latter also serves M = 17..64 with it; it was 8-60% slower at M = 64 without PDL, fifteenth session)
timeout 90 python3 -m pytest tests/ops/test_fp8_wgmma_gemv.py tests/cli/test_bench.py -m cuda -q -p no:cacheprovider -n 4 \
  --tb=short > "$OUT/pytest_fp8_wg.log" 2>&1; tail -3 "$OUT/pytest_fp8_wg.log"
timeout 120 python3 scripts/bench_gemm_stack.py --ops fp8 --ms 16,32,64 --variants default,wgpdl,wg64pdl \
  --json "$OUT/gemm_stack_wgpdl.json" > "$OUT/gemm_stack_wgpdl.log" 2>&1; cat "$OUT/gemm_stack_wgpdl.log"
# act_quant as a PDL launch (prepared, off): a decode Linear's act_quant -> GEMM chain in the layer
# stack, fp8 and fp4, with --variants default,aqpdl; and its cuda test
timeout 60 python3 -m pytest tests/ops/test_act_quant.py -m cuda -q -p no:cacheprovider -k pdl --tb=short \
  > "$OUT/pytest_aq.log" 2>&1; tail -3 "$OUT/pytest_aq.log"
timeout 120 python3 scripts/bench_gemm_stack.py --chain --ops fp8,fp4 --ms 1,16 --variants default,aqpdl \
  --json "$OUT/gemm_stack_chain.json" > "$OUT/gemm_stack_chain.log" 2>&1; cat "$OUT/gemm_stack_chain.log"
