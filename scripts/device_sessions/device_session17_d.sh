# Seventeenth session, call d: the final tree -- the full cuda tier, the layer-stack benchmark of the
# GEMM family through the public ops (the FP4 GEMV now a programmatic dependent launch, activation
# loads first at M > 8, the next launch triggered early when the grid has at most one CTA an SM;
# fp8_gemm's M = 33..64 Gluon kernel a PDL launch), and a second same-run sample of the M = 16 flags.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 270 python3 -m pytest -m "cuda and not slow" -q -p no:cacheprovider --timeout=240 -n 8 2>&1 | tail -15 | tee $OUT/pytest_cuda_full.log
timeout 130 python3 scripts/bench_gemm_stack.py --layers 8 --ms 1,16,64 --json $OUT/gemm_stack.json 2>&1 | tee $OUT/gemm_stack.log | \
    python3 -c "
import json, sys
for line in sys.stdin:
    try: r = json.loads(line)
    except Exception: print(line, end=''); continue
    if 'M' in r: print(r['op'], r['M'], r['N'], r['K'], 'lowbit', r['lowbit_stack_us'], 'row', r['rowwise_stack_us'], 'x', r['vs_rowwise_stack'], 'floor x', r['x_floor_stack'])
"
timeout 110 python3 scripts/bench_wgmma_gemv.py --ms 16 --configs p4s2w4,p4s2w4xfpdl,p4s2w4xfpdltr,p4s2w8xfpdltr \
    --json $OUT/flags16.json > $OUT/flags16.log 2>&1
python3 scripts/wgmma_bench_summary.py $OUT/flags16.json
