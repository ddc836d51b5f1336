#!/usr/bin/env bash
# First GPU call of the seventh session: the cuda tests of the changes last run only on the
# interpreter (coarse head / draft head / gathered / GEMV helpers), then the split-K Gluon decode
# kernel for fp8_gemm (checks + timing against the dispatch and cuBLAS). Results under $OUT.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 200 python3 -m pytest tests/ops/test_coarse_head.py tests/nn/test_draft_head.py tests/ops/test_gathered.py \
  tests/ops/test_gathered_mma.py tests/ops/test_fp8_gemm.py tests/ops/test_fp4_gemm.py tests/ops/test_mma_gemv.py \
  -m cuda -q -p no:cacheprovider -n 8 --timeout=300 > "$OUT/pytest_cuda_subset.log" 2>&1
tail -5 "$OUT/pytest_cuda_subset.log"
timeout 330 python3 scripts/try_fp8_decode_gluon.py --out "$OUT" ${CONFIGS:+--configs $CONFIGS} > "$OUT/decode_gluon.log" 2>&1
cat "$OUT/decode_gluon.log"
