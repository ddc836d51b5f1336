# Eighteenth session, call b: the whole-row variant's warp-specialized kernel (a 1-warp TMA
# producer partition, no CTA barrier per TMA issue, register caps for 2-3 CTAs an SM) -- its cuda
# tests, the coarse pass alone (warp-specialized / single-partition whole-row / per-group, same run)
# and the fast head end to end against cuBLAS bf16 + argmax.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 150 python3 -m pytest -m cuda -q -p no:cacheprovider --timeout=140 -n 4 tests/ops/test_coarse_wgmma.py \
    2>&1 | tail -4 | tee $OUT/pytest_cuda_wgmma.log
timeout 220 python3 scripts/tune_coarse_wgmma.py --ms 1,8,16,32,64 --bits 2 --table 1,0 --ws 1,0 --stages 3,4 \
    --blocks 128 --pipe 0 --magic 0 --chunks 1 --maxnreg=-1,0 --json $OUT/tune_ws.json > $OUT/tune_ws.log 2>&1
python3 scripts/jsonl_summary.py $OUT/tune_ws.log bits pipe magic block chunks
timeout 150 python3 scripts/bench_coarse_wgmma.py --ms 1,4,8,16,32,64 --bits 2 --no-previous \
    --json $OUT/head_fast_ws.json > $OUT/head_fast_ws.log 2>&1
python3 scripts/jsonl_summary.py $OUT/head_fast_ws.log shape floor_us agree_exact
