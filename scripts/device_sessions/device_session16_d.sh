# Sixteenth session, call d: KSPLIT = 2 in the FP4 wgmma GEMV (a second warp group per CTA sums half
# of the CTA's stages; partials added through shared memory) against the shipped pick, same run,
# layer stack, five shapes, M = 1 and 16; cuda tests of the GEMV first.
# (A record of what ran: its `ldsm` / `k2` / `mb8` config suffixes were removed from bench_wgmma_gemv.py
# afterwards; `ldsm` is now the default, the others measured slower -- docs/gemm.md, "Sixteenth session".)
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 150 python3 -m pytest -m "cuda and not slow" -q -p no:cacheprovider --timeout=120 tests/ops/test_fp4_wgmma_gemv.py 2>&1 | tail -4 | tee $OUT/pytest_gemv.log
timeout 330 python3 scripts/bench_wgmma_gemv.py --ms 1,16 \
    --configs p4s2w4,p4s2w4ldsm,p4s4w4ldsmk2,p4s4w4k2,p2s2w4ldsmk2,p4s2w8ldsm,p4s4w8ldsmk2 \
    --json $OUT/ksplit.json > $OUT/ksplit.log 2>&1
tail -3 $OUT/ksplit.log | cut -c1-300
python3 -c "
import json
for r in json.load(open('$OUT/ksplit.json')):
    if 'M' not in r: print(r); continue
    ks = sorted((k[:-9] for k in r if k.endswith('_stack_us') and k.startswith('wgmma')), key=lambda k: r[k + '_stack_us'])
    print(r['M'], r['N'], r['K'], 'auto', r['auto'], 'row', r['rowwise_stack_us'], ' '.join(f'{k[6:]}={r[k + \"_stack_us\"]}' for k in ks), 'err', max(v for k, v in r.items() if k.endswith('_err')))
"
