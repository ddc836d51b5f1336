# Fifteenth session, call b: the FP8 wgmma decode GEMV (lowbit/ops/fp8_gemm/gluon_wgmma_gemv.py) --
# its cuda tests, the coarse-wgmma tests again (x_int8_reference fix, NB 64 register cap), then the
# same-run A/B against the shipped fp8_gemm dispatch and _scaled_mm: a config sweep on N7168 K16384
# at M = 64 / 16, then the default rule on all five shapes at M = 1 / 16 / 64.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
set -o pipefail
timeout 150 python3 -m pytest -q -p no:cacheprovider -n 8 --timeout=140 -m cuda tests/ops/test_fp8_wgmma_gemv.py \
  tests/ops/test_coarse_wgmma.py 2>&1 | tail -15 | tee $OUT/pytest_cuda.log
timeout 200 python3 scripts/bench_fp8_wgmma_gemv.py --ms 64,16 --shapes 7168:16384 --no-single \
  --configs s4x32w8,s3x32w8,s6x32w8,s4x26w8,s4x19w8,s4x16w8,s4x64w4,s4x43w4,s4x32w4,s6x43w4,s3x16w8 \
  --json $OUT/sweep.json 2>&1 | tee $OUT/sweep.log | cut -c1-1500
timeout 200 python3 scripts/bench_fp8_wgmma_gemv.py --ms 1,16,64 --json $OUT/auto.json 2>&1 | tee $OUT/auto.log | cut -c1-1500
