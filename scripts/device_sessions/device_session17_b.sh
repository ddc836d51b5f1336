# Seventeenth session, call b: the FP4 wgmma GEMV as a programmatic dependent launch (PDL): cuda
# tests (PDL chains in a CUDA graph with the inputs written by the kernel just before), then the
# layer stack, same run, five shapes, M = 16 and M = 1: the shipped launch against PDL without
# the weights' L2 prefetch (np), with it (pdl), and with the next launch triggered at once (tr).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 150 python3 -m pytest -m "cuda and not slow" -q -p no:cacheprovider --timeout=120 -n 4 tests/ops/test_fp4_wgmma_gemv.py 2>&1 | tail -3 | tee $OUT/pytest_gemv.log
timeout 220 python3 scripts/bench_wgmma_gemv.py --ms 16 --configs p4s2w4,p4s2w4pdlnp,p4s2w4pdl,p4s2w4pdltr,p4s2w8,p4s2w8pdl \
    --json $OUT/pdl16.json > $OUT/pdl16.log 2>&1
python3 scripts/wgmma_bench_summary.py $OUT/pdl16.json
timeout 180 python3 scripts/bench_wgmma_gemv.py --ms 1 --configs p4s2w4,p4s2w4pdlnp,p4s2w4pdl,p4s2w4pdltr,p2s2w4pdl \
    --json $OUT/pdl1.json > $OUT/pdl1.log 2>&1
python3 scripts/wgmma_bench_summary.py $OUT/pdl1.json
