# Eighteenth session, call c: the register caps and ring depths of the whole-row kernels (coarse
# pass alone, same run), the full cuda tier of the tree, and the fast head end to end with the real
# model's accuracy (INT2 on the whole-row kernels, INT4 per group).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
summary() { python3 scripts/jsonl_summary.py "$1" bits pipe magic block chunks shape floor_us; }
timeout 150 python3 scripts/tune_coarse_wgmma.py --ms 8,16,32 --bits 2 --table 1 --ws 1 --stages 3,4,6 \
    --blocks 128 --pipe 0 --magic 0 --chunks 1 --maxnreg=-1,80 --json $OUT/tune_ws_small.json > $OUT/tune_ws_small.log 2>&1
summary $OUT/tune_ws_small.log
timeout 150 python3 scripts/tune_coarse_wgmma.py --ms 64 --bits 2 --table 1 --ws 1,0 --stages 2,3 \
    --blocks 128,64 --pipe 0 --magic 0 --chunks 1 --maxnreg=-1,0,128 --json $OUT/tune_ws64.json > $OUT/tune_ws64.log 2>&1
summary $OUT/tune_ws64.log
timeout 280 python3 -m pytest -m "cuda and not slow" -q -p no:cacheprovider --timeout=240 -n 8 2>&1 | tail -6 | tee $OUT/pytest_cuda_full.log
timeout 150 python3 scripts/bench_coarse_wgmma.py --ms 1,4,16,64 --bits 2,4 --real .realhead/smollm2_head.pt.xz \
    --json $OUT/head_fast_c.json > $OUT/head_fast_c.log 2>&1
summary $OUT/head_fast_c.log
