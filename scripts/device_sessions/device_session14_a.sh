# Fourteenth session, call a: the int8-wgmma fast-mode coarse pass -- its cuda tests, then the
# same-run timing against the previous dispatch and cuBLAS bf16 (124160 x 5120).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
set -o pipefail
timeout 240 python3 -m pytest -q -p no:cacheprovider -x --timeout=200 tests/ops/test_coarse_wgmma.py -m cuda 2>&1 | tail -40 | tee $OUT/pytest_coarse_wgmma.log
timeout 300 python3 scripts/bench_coarse_wgmma.py --ms 1,4,16,64 --json $OUT/wgmma.json 2>&1 | tee $OUT/wgmma.log | tail -40
