# Fifteenth session, call d: fp8_gemm dispatching M = 9..16 to the wgmma GEMV (cuda tests of the GEMV,
# fp8_gemm and Linear), then the Triton kernel's configs at M = 64 on N7168 K16384 (the 1.3x
# byte-floor target), stack timer, same run as the shipped default and _scaled_mm.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
set -o pipefail
timeout 150 python3 -m pytest -q -p no:cacheprovider -n 8 --timeout=140 -m cuda tests/ops/test_fp8_wgmma_gemv.py \
  tests/ops/test_fp8_gemm.py tests/nn/test_linear.py 2>&1 | tail -8 | tee $OUT/pytest_cuda.log
timeout 200 python3 scripts/bench_fp8_wgmma_gemv.py --no-single --ms 64 --shapes 7168:16384 --json $OUT/triton_m64.json \
  --triton "64:64:4:3:0:0:2;64:64:4:3:0:0:4;64:64:4:4:0:1:0;64:64:4:4:0:1:2;64:64:4:5:0:1:3;64:128:4:3:0:1:0;64:128:8:4:0:1:2;64:128:8:4:0:1:4;64:128:4:4:0:0:4;64:64:4:4:1:0:0;64:128:4:4:1:0:0;64:64:4:5:1:0:2;64:64:4:3:0:0:0" \
  2>&1 | tee $OUT/triton_m64.log | cut -c1-200
