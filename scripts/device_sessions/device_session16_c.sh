# Sixteenth session, call c: (1) the FP4 wgmma GEMV with the new pick rule (four stages a CTA through
# a ring of two), against the same config with the next block's ldmatrix issued ahead (ldsm) and the
# pipelined wgmma schedule (pipe), same run, layer stack, five shapes, M = 1 and 16; (2) the draft
# head's fast argmax re-timed at M = 16 / 64 since the fifteenth session's NB = 64 register cap.
# (A record of what ran: its `ldsm` / `k2` / `mb8` config suffixes were removed from bench_wgmma_gemv.py
# afterwards; `ldsm` is now the default, the others measured slower -- docs/gemm.md, "Sixteenth session".)
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 100 python3 -m pytest -m "cuda and not slow" -q -p no:cacheprovider --timeout=90 tests/ops/test_fp4_wgmma_gemv.py 2>&1 | tail -3
timeout 330 python3 scripts/bench_wgmma_gemv.py --ms 1,16 \
    --configs p4s2w4,p4s2w4ldsm,p4s2w4pipe,p4s2w8,p4s2w8ldsm,p2s2w4,p2s2w4ldsm \
    --json $OUT/ldsm.json > $OUT/ldsm.log 2>&1
python3 -c "
import json
for r in json.load(open('$OUT/ldsm.json')):
    if 'M' not in r: print(r); continue
    ks = sorted((k[:-9] for k in r if k.endswith('_stack_us') and k.startswith('wgmma')), key=lambda k: r[k + '_stack_us'])
    print(r['M'], r['N'], r['K'], 'auto', r['auto'], 'row', r['rowwise_stack_us'], ' '.join(f'{k[6:]}={r[k + \"_stack_us\"]}' for k in ks), 'err', max(v for k, v in r.items() if k.endswith('_err')))
"
timeout 200 python3 scripts/bench_coarse_wgmma.py --ms 16,64 --bits 2,4 --json $OUT/head_fast.json > $OUT/head_fast.log 2>&1
grep -E '"argmax_us"' $OUT/head_fast.log | python3 -c "
import json, sys
for l in sys.stdin:
    r = json.loads(l); print(r.get('M'), r.get('bits'), r.get('impl'), 'argmax', r.get('argmax_us'), 'topk16', r.get('topk16_us'), 'coarse', r.get('coarse_us'), 'vs cublas', r.get('argmax_vs_cublas'), 'x floor', r.get('argmax_x_floor'))
"
