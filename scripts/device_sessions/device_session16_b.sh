# Sixteenth session, call b: the FP4 wgmma GEMV with every activation load of a CTA issued up front
# (x_early, the default now) against the stage-at-a-time staging (`late`), same run, layer stack,
# on the benchmark's five shapes at M = 1 and 16, over the configs the dispatch rule picks from.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 100 python3 -m pytest -m "cuda and not slow" -q -p no:cacheprovider --timeout=90 tests/ops/test_fp4_wgmma_gemv.py 2>&1 | tail -3
timeout 420 python3 scripts/bench_wgmma_gemv.py --ms 1,16 \
    --configs p1s1w4,p1s1w4late,p2s2w4,p2s2w4late,p4s2w4,p4s2w4late,p4s2w8,p4s2w8late,p1s1w8,p1s1w8late,p4s4w4,p4s4w8 \
    --json $OUT/early.json > $OUT/early.log 2>&1
python3 -c "
import json
for r in json.load(open('$OUT/early.json')):
    if 'M' not in r: print(r); continue
    ks = sorted((k[:-9] for k in r if k.endswith('_stack_us') and k.startswith('wgmma')), key=lambda k: r[k + '_stack_us'])
    print(r['M'], r['N'], r['K'], 'auto', r['auto'], 'row', r['rowwise_stack_us'], 'mma', r['mma_gemv_stack_us'], ' '.join(f'{k[6:]}={r[k + \"_stack_us\"]}' for k in ks), 'err', max(v for k, v in r.items() if k.endswith('_err')))
"
