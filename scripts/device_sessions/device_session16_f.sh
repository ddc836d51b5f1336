# Sixteenth session, call f: cuda tests of the FP4 GEMV (m_block = 8 rows a CTA is new) and the GEMM
# family, then M = 16 with a CTA per 8 activation rows (twice the CTAs, each tile decoded twice)
# against the shipped 16-row CTAs, same run, layer stack, five shapes.
# (A record of what ran: its `ldsm` / `k2` / `mb8` config suffixes were removed from bench_wgmma_gemv.py
# afterwards; `ldsm` is now the default, the others measured slower -- docs/gemm.md, "Sixteenth session".)
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 200 python3 -m pytest -m "cuda and not slow" -q -p no:cacheprovider --timeout=150 -n 4 tests/ops/test_fp4_wgmma_gemv.py \
    tests/ops/test_fp4_gemm.py tests/ops/test_fp8_gemm.py tests/ops/test_fp8_wgmma_gemv.py tests/nn/test_linear.py 2>&1 | tail -2 | tee $OUT/pytest_gemm.log
timeout 200 python3 scripts/bench_wgmma_gemv.py --ms 16 --configs p4s2w4,p4s2w4mb8,p4s2w8mb8,p2s2w4mb8,p4s2w8 \
    --json $OUT/mb8.json > $OUT/mb8.log 2>&1
tail -1 $OUT/mb8.log | cut -c1-200
python3 -c "
import json
for r in json.load(open('$OUT/mb8.json')):
    if 'M' not in r: print(r); continue
    ks = sorted((k[:-9] for k in r if k.endswith('_stack_us') and k.startswith('wgmma')), key=lambda k: r[k + '_stack_us'])
    print(r['M'], r['N'], r['K'], 'auto', r['auto'], 'row', r['rowwise_stack_us'], ' '.join(f'{k[6:]}={r[k + \"_stack_us\"]}' for k in ks), 'best x', r['best_vs_rowwise_stack'], 'err', max(v for k, v in r.items() if k.endswith('_err')))
"
