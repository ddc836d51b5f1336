# Sixteenth session, call e: the FP4 wgmma GEMV with its whole ring filled before the activations
# are staged (the refill path used to issue STAGES - 1 stages up front and the last one only after
# the staging), cuda tests, then the layer stack on the five shapes at M = 1 and 16 (compare with
# calls c / d: s2_split1_w4_ldsm there is the same config before this change).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 150 python3 -m pytest -m "cuda and not slow" -q -p no:cacheprovider --timeout=120 -n 2 tests/ops/test_fp4_wgmma_gemv.py tests/ops/test_fp4_gemm.py 2>&1 | tail -2 | tee $OUT/pytest_gemv.log
timeout 250 python3 scripts/bench_wgmma_gemv.py --ms 1,16 --configs p4s2w4,p4s2w4pipe,p4s4w4,p4s2w8 \
    --json $OUT/ring.json > $OUT/ring.log 2>&1
tail -2 $OUT/ring.log | cut -c1-300
python3 -c "
import json
for r in json.load(open('$OUT/ring.json')):
    if 'M' not in r: print(r); continue
    ks = sorted((k[:-9] for k in r if k.endswith('_stack_us') and k.startswith('wgmma')), key=lambda k: r[k + '_stack_us'])
    print(r['M'], r['N'], r['K'], 'auto', r['auto'], 'row', r['rowwise_stack_us'], ' '.join(f'{k[6:]}={r[k + \"_stack_us\"]}' for k in ks), 'best x', r['best_vs_rowwise_stack'], 'err', max(v for k, v in r.items() if k.endswith('_err')))
"
