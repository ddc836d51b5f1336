# Nineteenth session, call e: the final whole-row INT2 pass (byte-permute decode only, the
# warp-specialized loop unrolled by the ring) and its persistent launch -- the coarse-wgmma cuda
# tests (kernels and DraftHead dispatch, graph, compile), the coarse pass alone persistent or not
# (same run), and the fast head end to end on both against the per-group pass and cuBLAS bf16.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 120 python3 -m pytest -m cuda -q -p no:cacheprovider --timeout=110 -n 8 tests/ops/test_coarse_wgmma.py \
    2>&1 | tail -4 | tee $OUT/pytest_cuda_wgmma.log
timeout 60 python3 scripts/tune_coarse_wgmma.py --bits 2 --ms 1,8,16,32 --table 1 --ws 1 --persist 0,1 \
    --stages 4 --blocks 128 --pipe 0 --magic 0 --json $OUT/tune_persist.json > $OUT/tune_persist.log 2>&1
python3 scripts/jsonl_summary.py $OUT/tune_persist.log bits pipe magic chunks table ws block stages
timeout 90 python3 scripts/bench_coarse_wgmma.py --ms 1,16,64 --bits 2 --no-previous \
    --json $OUT/head_fast.json > $OUT/head_fast.log 2>&1
python3 scripts/jsonl_summary.py $OUT/head_fast.log shape floor_us agree_exact
