# Fourteenth session, call b: the int8-wgmma coarse pass's cuda tests (candidate check fixed,
# negated zero term), then the launch-option sweep (pipe x magic x stages x block per M).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
set -o pipefail
timeout 200 python3 -m pytest -q -p no:cacheprovider --timeout=150 tests/ops/test_coarse_wgmma.py -m cuda 2>&1 | tail -30 | tee $OUT/pytest_coarse_wgmma.log
timeout 380 python3 scripts/tune_coarse_wgmma.py --ms 1,16,64 --json $OUT/tune.json 2>&1 | tee $OUT/tune.log | tail -80
