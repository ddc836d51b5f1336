# Nineteenth session, call e: the final dispatch -- the whole-row INT2 pass with the byte-permute
# decode only, the warp-specialized loop unrolled by the ring -- its draft-head / coarse-head cuda
# tests, and the fast head end to end against the per-group pass and cuBLAS bf16 + argmax, with the
# real model's accuracy.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 220 python3 -m pytest -m cuda -q -p no:cacheprovider --timeout=200 -n 8 tests/ops/test_coarse_wgmma.py \
    tests/ops/test_coarse_head.py tests/nn/test_draft_head.py 2>&1 | tail -4 | tee $OUT/pytest_cuda_head.log
timeout 220 python3 scripts/bench_coarse_wgmma.py --ms 1,4,8,16,32,64 --bits 2,4 --no-previous \
    --real .realhead/smollm2_head.pt.xz --json $OUT/head_fast.json > $OUT/head_fast.log 2>&1
python3 scripts/jsonl_summary.py $OUT/head_fast.log shape floor_us agree_exact
