# Nineteenth session, call a: the whole-row INT2 coarse pass with the byte-permute decode (PRMT) and
# the ring-unrolled warp-specialized loop -- its cuda tests, the coarse pass alone against the
# multiply decode (same run), and the fast head end to end on every path against cuBLAS bf16.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 240 python3 -m pytest -m cuda -q -p no:cacheprovider --timeout=200 -n 8 tests/ops/test_coarse_wgmma.py \
    2>&1 | tail -4 | tee $OUT/pytest_cuda_wgmma.log
timeout 150 python3 scripts/tune_coarse_wgmma.py --bits 2 --ms 1,8,16,32 --table 1,2 --ws 1,0 --unroll 0,1 \
    --stages 4 --blocks 128 --pipe 0 --magic 0 --json $OUT/tune_small.json > $OUT/tune_small.log 2>&1
timeout 100 python3 scripts/tune_coarse_wgmma.py --bits 2 --ms 64 --table 1,2 --ws 1,0 --unroll 0,1 \
    --stages 2,3 --blocks 128 --pipe 0 --magic 0 --json $OUT/tune_64.json > $OUT/tune_64.log 2>&1
python3 scripts/jsonl_summary.py $OUT/tune_small.log bits pipe magic chunks block
python3 scripts/jsonl_summary.py $OUT/tune_64.log bits pipe magic chunks block
timeout 200 python3 scripts/bench_coarse_wgmma.py --ms 1,4,8,16,32,64 --bits 2 --no-previous \
    --real .realhead/smollm2_head.pt.xz --json $OUT/head_fast.json > $OUT/head_fast.log 2>&1
python3 scripts/jsonl_summary.py $OUT/head_fast.log shape floor_us
