# Nineteenth session, call b: the whole-row INT2 coarse pass on stage-tiled codes and words (one
# contiguous box a stage) against the row-major layout, same run; its cuda tests.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 240 python3 -m pytest -m cuda -q -p no:cacheprovider --timeout=200 -n 8 tests/ops/test_coarse_wgmma.py \
    2>&1 | tail -4 | tee $OUT/pytest_cuda_wgmma.log
timeout 200 python3 scripts/tune_coarse_wgmma.py --bits 2 --ms 1,8,16,32 --table 2 --ws 1 --unroll 1 --tiled 0,1 \
    --stages 3,4,6 --blocks 128 --pipe 0 --magic 0 --json $OUT/tune_tiled.json > $OUT/tune_tiled.log 2>&1
timeout 100 python3 scripts/tune_coarse_wgmma.py --bits 2 --ms 64 --table 2 --ws 1,0 --unroll 1 --tiled 0,1 \
    --stages 2,3 --blocks 128 --pipe 0 --magic 0 --json $OUT/tune_tiled64.json > $OUT/tune_tiled64.log 2>&1
python3 scripts/jsonl_summary.py $OUT/tune_tiled.log bits pipe magic chunks block table
python3 scripts/jsonl_summary.py $OUT/tune_tiled64.log bits pipe magic chunks block table
