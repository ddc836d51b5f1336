# Fifteenth session, call g: fp8_gemm M = 33..64 on the prefill Gluon kernel (64 x 64 tiles, 8-block
# ring, no split): the fp8 cuda tests, then "shipped" (the new dispatch) against the Triton 64 x 64
# kernel it replaces (--triton ...:0 = the launcher's split) and the stages around 8, same run.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
set -o pipefail
timeout 150 python3 -m pytest -q -p no:cacheprovider -n 8 --timeout=140 -m cuda tests/ops/test_fp8_gemm.py \
  tests/ops/test_fp8_wgmma_gemv.py tests/nn/test_linear.py 2>&1 | tail -8 | tee $OUT/pytest_cuda.log
B="python3 scripts/bench_fp8_wgmma_gemv.py --no-single --triton 64:64:4:3:0:0:0"
timeout 120 $B --ms 64,56,48,40 --shapes 7168:16384 --prefill "64:7:0;64:9:0;64:10:0" --json $OUT/big.json 2>&1 | cut -c1-150
timeout 120 $B --ms 64,48 --shapes 2112:7168,24576:1536,4096:7168,7168:2048 --json $OUT/small.json 2>&1 | cut -c1-150
