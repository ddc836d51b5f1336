# Seventeenth session, call c: call b found the weights' L2 prefetch before the PDL wait harmful (removed since)
# (11.6 -> 18 us at M = 16 N24576 K1536) and PDL alone a small gain; here PDL without the prefetch
# (pdl), with the next launch triggered at once (tr) and with the activation loads first (xf),
# same run, layer stack, five shapes, M = 16 and M = 1; then fp8_gemm's M = 33..64 Gluon kernel with and
# without PDL (scripts/bench_decode_pdl.py).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 200 python3 scripts/bench_wgmma_gemv.py --ms 16 --configs p4s2w4,p4s2w4pdl,p4s2w4pdltr,p4s2w4xfpdl,p4s2w4xfpdltr,p4s2w8pdl,p4s2w8pdltr \
    --json $OUT/tr16.json > $OUT/tr16.log 2>&1
python3 scripts/wgmma_bench_summary.py $OUT/tr16.json
timeout 150 python3 scripts/bench_wgmma_gemv.py --ms 1 --configs p4s2w4,p4s2w4pdl,p4s2w4pdltr,p2s2w4pdl,p2s2w4pdltr \
    --json $OUT/tr1.json > $OUT/tr1.log 2>&1
python3 scripts/wgmma_bench_summary.py $OUT/tr1.json
timeout 120 python3 -m pytest -m "cuda and not slow" -q -p no:cacheprovider --timeout=100 -n 4 tests/ops/test_fp8_gemm.py -k gluon 2>&1 | tail -2 | tee $OUT/pytest_fp8_gluon.log
timeout 150 python3 scripts/bench_decode_pdl.py --ms 40,64 --json $OUT/fp8_pdl.json > $OUT/fp8_pdl.log 2>&1
cat $OUT/fp8_pdl.log | cut -c1-400
