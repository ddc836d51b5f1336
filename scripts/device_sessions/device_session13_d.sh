# Thirteenth session, call d: the wgmma GEMV with the spin reduction and the fp4_gemm dispatch to
# it -- cuda tests of the GEMM family, the M = 16 / M = 1 config sweeps, then the layer-stack
# benchmark of the public fp4_gemm (what the dispatch picks) against row-wise _scaled_mm.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -m pytest -q -p no:cacheprovider --timeout=300 -n 4 -m cuda tests/ops/test_fp4_wgmma_gemv.py \
    tests/ops/test_fp4_gemm.py tests/ops/test_mma_gemv.py tests/nn/test_linear.py 2>&1 | tail -15 | tee $OUT/pytest_gemm.log
summ() { python3 -c "
import json, sys
for line in sys.stdin:
    try: r = json.loads(line)
    except Exception: print(line, end=''); continue
    if 'M' not in r: print(r); continue
    ks = sorted((k[:-9] for k in r if k.endswith('_stack_us')), key=lambda k: r[k + '_stack_us'])
    print(r['M'], r['N'], r['K'], 'row', r['rowwise_stack_us'], ' '.join(f'{k}={r[k + \"_stack_us\"]}' for k in ks), 'errmax', max(v for k, v in r.items() if k.endswith('_err')))
"; }
python3 scripts/bench_wgmma_gemv.py --ms 16 --configs p4s2w4,p4s2w8,p1s1w8,p1s1w8nospin,p2s2w8,p2s2w8nospin \
    --json $OUT/wgmma_gemv_m16.json 2>&1 | tee $OUT/wgmma_gemv_m16.log | summ
python3 scripts/bench_wgmma_gemv.py --ms 1 --configs p1s1w4,p1s1w4nospin,p2s2w4,p2s2w4pipe \
    --json $OUT/wgmma_gemv_m1.json 2>&1 | tee $OUT/wgmma_gemv_m1.log | summ
python3 scripts/bench_gemm_stack.py --layers 8 --ms 1,16 --ops fp4 --json $OUT/gemm_stack_fp4.json 2>&1 | tee $OUT/gemm_stack_fp4.log | \
    python3 -c "
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    if 'M' in r: print(r['M'], r['N'], r['K'], 'lowbit', r['lowbit_stack_us'], 'row', r['rowwise_stack_us'], 'x', r['vs_rowwise_stack'], 'single x', r['vs_rowwise_single'])
"
