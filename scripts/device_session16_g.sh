# Sixteenth session, call g: cuda tests of the FP4 GEMV / fp4_gemm / Linear on the final kernel, then
# the activation loads issued before the weight TMAs (xf) against after them (the default), same
# run, layer stack, five shapes, M = 1 and 16, on the configs the pick rule uses (p4s2w4 everywhere
# but N2112 at M = 1 (p2s2w4) and the split M = 16 shapes N7168 K16384 / N4096 K7168 (p4s2w8)).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 150 python3 -m pytest -m "cuda and not slow" -q -p no:cacheprovider --timeout=120 -n 4 tests/ops/test_fp4_wgmma_gemv.py \
    tests/ops/test_fp4_gemm.py tests/nn/test_linear.py 2>&1 | tail -2 | tee $OUT/pytest_gemm.log
timeout 200 python3 scripts/bench_wgmma_gemv.py --ms 1,16 --configs p4s2w4,p4s2w4xf,p4s4w4xf,p2s2w4,p4s2w8,p4s2w8xf \
    --json $OUT/xfirst.json > $OUT/xfirst.log 2>&1
tail -1 $OUT/xfirst.log | cut -c1-200
python3 -c "
import json
for r in json.load(open('$OUT/xfirst.json')):
    if 'M' not in r: print(r); continue
    ks = sorted((k[:-9] for k in r if k.endswith('_stack_us') and k.startswith('wgmma')), key=lambda k: r[k + '_stack_us'])
    print(r['M'], r['N'], r['K'], 'auto', r['auto'], 'row', r['rowwise_stack_us'], 'tensor', r['tensor_stack_us'], ' '.join(f'{k[6:]}={r[k + \"_stack_us\"]}' for k in ks), 'err', max(v for k, v in r.items() if k.endswith('_err')))
"
