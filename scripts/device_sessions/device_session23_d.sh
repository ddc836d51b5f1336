#!/usr/bin/env bash
# Session 23, call d: the fp4 dispatch test after its fix, then the registered benchmarks of #4
# (sparse_attn with its new floor / ceiling columns, hc_split_sinkhorn) and of #9 (fp8_gemm,
# fp4_gemm with the layer-stack rows, act_quant), full shape lists. Results under $OUT.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 60 python3 -m pytest tests/ops/test_fp4_wgmma_gemv.py -m cuda -q -p no:cacheprovider -k dispatches --tb=short \
  > "$OUT/pytest_fp4_dispatch.log" 2>&1; tail -2 "$OUT/pytest_fp4_dispatch.log"
timeout 230 python3 -m lowbit.cli bench --op sparse_attn --op hc_split_sinkhorn --out "$OUT/attn" > "$OUT/bench_attn.log" 2>&1
tail -45 "$OUT/bench_attn.log"
timeout 260 python3 -m lowbit.cli bench --op fp8_gemm --op fp4_gemm --op act_quant --out "$OUT/gemm" > "$OUT/bench_gemm.log" 2>&1
tail -80 "$OUT/bench_gemm.log"
