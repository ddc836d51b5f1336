# Eighteenth session, call a: the int8-wgmma coarse pass's whole-row variant (INT2: group scales as
# integer multiples of a row unit, one int32 wgmma chain over all of K, no per-group epilogue) --
# its cuda tests, the coarse pass alone against the per-group variant, and the fast head end to end
# (both variants and the previous dispatch, cuBLAS bf16 + argmax in the same run), plus the real
# model's fast-mode accuracy on both.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 200 python3 -m pytest -m cuda -q -p no:cacheprovider --timeout=180 -n 4 tests/ops/test_coarse_wgmma.py \
    tests/ops/test_coarse_head.py tests/nn/test_draft_head.py 2>&1 | tail -15 | tee $OUT/pytest_cuda_head.log
timeout 150 python3 scripts/tune_coarse_wgmma.py --ms 1,8,16,32,64 --bits 2 --table 1,0 --stages 3,4 --blocks 128 \
    --pipe 0 --magic 0 --chunks 1,2 --json $OUT/tune_table.json > $OUT/tune_table.log 2>&1
grep -v error $OUT/tune_table.log | tail -45
timeout 240 python3 scripts/bench_coarse_wgmma.py --ms 1,4,8,16,32,64 --bits 2,4 --real .realhead/smollm2_head.pt.xz \
    --json $OUT/head_fast.json > $OUT/head_fast.log 2>&1
cat $OUT/head_fast.log | tail -70
