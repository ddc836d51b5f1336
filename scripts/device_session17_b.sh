# Seventeenth session, call b: the FP4 wgmma GEMV as a programmatic dependent launch (PDL): cuda
# tests (PDL chains in a CUDA graph with the inputs written by the kernel just before), then the
# layer stack, same run, five shapes, M = 16 and M = 1: the shipped launch against PDL without
# the weights' L2 prefetch (np), with it (pdl), and with the next launch triggered at once (tr).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 150 python3 -m pytest -m "cuda and not slow" -q -p no:cacheprovider --timeout=120 -n 4 tests/ops/test_fp4_wgmma_gemv.py 2>&1 | tail -3 | tee $OUT/pytest_gemv.log
summ() {
python3 -c "
import json
for r in json.load(open('$1')):
    if 'M' not in r: print(r); continue
    ks = sorted((k[:-9] for k in r if k.endswith('_stack_us') and k.startswith('wgmma')), key=lambda k: r[k + '_stack_us'])
    print(r['M'], r['N'], r['K'], 'auto', r['auto'], 'row', r['rowwise_stack_us'], ' '.join(f'{k[6:]}={r[k + \"_stack_us\"]}' for k in ks), 'best x', r['best_vs_rowwise_stack'], 'err', max(v for k, v in r.items() if k.endswith('_err')))
"
}
timeout 220 python3 scripts/bench_wgmma_gemv.py --ms 16 --configs p4s2w4,p4s2w4pdlnp,p4s2w4pdl,p4s2w4pdltr,p4s2w8,p4s2w8pdl \
    --json $OUT/pdl16.json > $OUT/pdl16.log 2>&1
summ $OUT/pdl16.json
timeout 180 python3 scripts/bench_wgmma_gemv.py --ms 1 --configs p4s2w4,p4s2w4pdlnp,p4s2w4pdl,p4s2w4pdltr,p2s2w4pdl \
    --json $OUT/pdl1.json > $OUT/pdl1.log 2>&1
summ $OUT/pdl1.json
