# Seventeenth session, call e: fp8_gemm's M = 33..64 Gluon kernel with the next launch triggered
# early (then the default with PDL for grids of at most one program an SM; off by default since):
# the Gluon cuda tests, then the layer stack without PDL, with PDL, and with PDL + trigger, same run, M = 64 and 40.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 100 python3 -m pytest -m "cuda and not slow" -q -p no:cacheprovider --timeout=90 -n 4 tests/ops/test_fp8_gemm.py -k gluon 2>&1 | tail -2 | tee $OUT/pytest_fp8_gluon.log
timeout 120 python3 scripts/bench_decode_pdl.py --ms 64,40 --json $OUT/fp8_pdl_tr.json > $OUT/fp8_pdl_tr.log 2>&1
cut -c1-420 $OUT/fp8_pdl_tr.log
