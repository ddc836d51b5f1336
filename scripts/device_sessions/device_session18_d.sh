# Eighteenth session, call d: the final dispatch -- INT2 fast mode on the whole-row kernels at every
# M (warp-specialized up to NB = 32, the single-partition loop at NB = 64), INT4 per group at M >= 5
# -- its draft-head / coarse-head cuda tests, and the fast head end to end against the previous
# dispatches and cuBLAS bf16 + argmax, with the real model's accuracy.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 200 python3 -m pytest -m cuda -q -p no:cacheprovider --timeout=180 -n 6 tests/ops/test_coarse_wgmma.py \
    tests/ops/test_coarse_head.py tests/nn/test_draft_head.py 2>&1 | tail -4 | tee $OUT/pytest_cuda_head.log
timeout 200 python3 scripts/bench_coarse_wgmma.py --ms 1,4,8,16,32,64 --bits 2,4 --real .realhead/smollm2_head.pt.xz \
    --json $OUT/head_fast_d.json > $OUT/head_fast_d.log 2>&1
python3 scripts/jsonl_summary.py $OUT/head_fast_d.log shape floor_us agree_exact
