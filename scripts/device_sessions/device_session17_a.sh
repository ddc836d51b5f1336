# Seventeenth session, call a: (1) cuda tests of the GEMM family on the final tree of the sixteenth
# session plus the x_first switch; (2) the FP4 wgmma GEMV with its activation loads issued before
# the weight TMAs (xf), against the shipped order, rings of two and four, same run, layer stack,
# five shapes, M = 16 then M = 1; (3) the layer-stack benchmark of the whole family.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 200 python3 -m pytest -m "cuda and not slow" -q -p no:cacheprovider --timeout=150 -n 4 tests/ops/test_fp4_wgmma_gemv.py \
    tests/ops/test_fp4_gemm.py tests/ops/test_fp8_gemm.py tests/ops/test_fp8_wgmma_gemv.py tests/nn/test_linear.py 2>&1 | tail -3 | tee $OUT/pytest_gemm.log
timeout 200 python3 scripts/bench_wgmma_gemv.py --ms 16 --configs p4s2w4,p4s2w4xf,p4s4w4xf,p4s2w8,p4s2w8xf \
    --json $OUT/xf16.json > $OUT/xf16.log 2>&1
python3 scripts/wgmma_bench_summary.py $OUT/xf16.json
timeout 150 python3 scripts/bench_wgmma_gemv.py --ms 1 --configs p4s2w4,p4s2w4xf,p4s4w4xf,p2s2w4,p2s2w4xf \
    --json $OUT/xf1.json > $OUT/xf1.log 2>&1
python3 scripts/wgmma_bench_summary.py $OUT/xf1.json
timeout 150 python3 scripts/bench_gemm_stack.py --layers 8 --ms 1,16,64 --json $OUT/gemm_stack.json > $OUT/gemm_stack.log 2>&1
tail -25 $OUT/gemm_stack.log
