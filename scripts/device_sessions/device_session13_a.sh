# Thirteenth session, call a: the Gluon wgmma FP4 decode GEMV -- its cuda tests, then the
# same-run A/B against mma_gemv and row-wise _scaled_mm (stack and single-call timers).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -m pytest -q -p no:cacheprovider --timeout=300 tests/ops/test_fp4_wgmma_gemv.py -m cuda 2>&1 | tail -25 | tee $OUT/pytest_wgmma_gemv.log
python3 scripts/bench_wgmma_gemv.py --ms 1,16 --json $OUT/wgmma_gemv.json 2>&1 | tee $OUT/wgmma_gemv.log | tail -40
