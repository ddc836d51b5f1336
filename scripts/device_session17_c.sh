# Seventeenth session, call c: call b found the weights' L2 prefetch before the PDL wait harmful
# (11.6 -> 18 us at M = 16 N24576 K1536) and PDL alone a small gain; here PDL without the prefetch
# (pdlnp), with the next launch triggered at once (tr) and with the activation loads first (xf),
# same run, layer stack, five shapes, M = 16 and M = 1.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
summ() {
python3 -c "
import json
for r in json.load(open('$1')):
    if 'M' not in r: print(r); continue
    ks = sorted((k[:-9] for k in r if k.endswith('_stack_us') and k.startswith('wgmma')), key=lambda k: r[k + '_stack_us'])
    print(r['M'], r['N'], r['K'], 'auto', r['auto'], 'row', r['rowwise_stack_us'], ' '.join(f'{k[6:]}={r[k + \"_stack_us\"]}' for k in ks), 'best x', r['best_vs_rowwise_stack'], 'err', max(v for k, v in r.items() if k.endswith('_err')))
"
}
timeout 240 python3 scripts/bench_wgmma_gemv.py --ms 16 --configs p4s2w4,p4s2w4pdlnp,p4s2w4pdlnptr,p4s2w4xfpdlnp,p4s2w4xfpdlnptr,p4s2w8pdlnp,p4s2w8pdlnptr \
    --json $OUT/tr16.json > $OUT/tr16.log 2>&1
summ $OUT/tr16.json
timeout 180 python3 scripts/bench_wgmma_gemv.py --ms 1 --configs p4s2w4,p4s2w4pdlnp,p4s2w4pdlnptr,p2s2w4pdlnp,p2s2w4pdlnptr \
    --json $OUT/tr1.json > $OUT/tr1.log 2>&1
summ $OUT/tr1.json
