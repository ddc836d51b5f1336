# Nineteenth session, call d: the warp-specialized byte-permute kernel with 2 / 4 independent
# accumulators (80 registers: still 2 CTAs an SM of 384 threads) and with 64-token blocks (a CTA of
# 8 warps: 3-4 CTAs an SM), against the single-accumulator loop; its cuda tests.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 240 python3 -m pytest -m cuda -q -p no:cacheprovider --timeout=200 -n 8 tests/ops/test_coarse_wgmma.py \
    2>&1 | tail -4 | tee $OUT/pytest_cuda_wgmma.log
timeout 240 python3 scripts/tune_coarse_wgmma.py --bits 2 --ms 1,8,16,32 --table 2 --ws 1 --unroll 1 --nacc 0,2,4 \
    --stages 4 --blocks 128,64 --maxnreg=-1,80 --pipe 0 --magic 0 --json $OUT/tune_nacc.json > $OUT/tune_nacc.log 2>&1
python3 scripts/jsonl_summary.py $OUT/tune_nacc.log bits pipe magic chunks table ws unroll tiled stages
