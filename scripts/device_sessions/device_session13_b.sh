# Thirteenth session, call b: the wgmma FP4 GEMV with its CTA's activations staged once, all
# weight loads up front (PER_SPLIT <= STAGES), 4 / 8 warps, the pipelined schedule: cuda tests,
# then the same-run config sweep against mma_gemv and row-wise _scaled_mm.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -m pytest -q -p no:cacheprovider --timeout=300 tests/ops/test_fp4_wgmma_gemv.py -m cuda 2>&1 | tail -25 | tee $OUT/pytest_wgmma_gemv.log
python3 scripts/bench_wgmma_gemv.py --ms 1,16 --json $OUT/wgmma_gemv.json 2>&1 | tee $OUT/wgmma_gemv.log | python3 -c "
import json, sys
for line in sys.stdin:
    try: r = json.loads(line)
    except Exception: print(line, end=''); continue
    if 'M' not in r: print(r); continue
    ks = sorted((k[:-9] for k in r if k.endswith('_stack_us')), key=lambda k: r[k + '_stack_us'])
    print(r['M'], r['N'], r['K'], 'row', r['rowwise_stack_us'], ' '.join(f'{k}={r[k + \"_stack_us\"]}' for k in ks), 'errmax', max(v for k, v in r.items() if k.endswith('_err')))
"
