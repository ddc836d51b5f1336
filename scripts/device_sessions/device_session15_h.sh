# Fifteenth session, call h: the full cuda tier on the final tree, then the layer-stack GEMM benchmark
# (fp8_gemm through the new decode dispatch: M = 9..16 wgmma GEMV, M = 33..64 the prefill Gluon kernel
# where the 64-row tiles fill the SMs) for the recorded numbers.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 280 python3 -m pytest -m "cuda and not slow" -q -p no:cacheprovider --timeout=250 -n 8 2>&1 | tail -15 | tee $OUT/pytest_cuda_full.log
timeout 130 python3 scripts/bench_gemm_stack.py --layers 8 --ms 1,16,64 --json $OUT/gemm_stack.json 2>&1 | tee $OUT/gemm_stack.log | \
    python3 -c "
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    if 'M' in r: print(r['op'], r['M'], r['N'], r['K'], 'lowbit', r['lowbit_stack_us'], 'row', r['rowwise_stack_us'], 'x', r['vs_rowwise_stack'], 'single x', r['vs_rowwise_single'], 'floor x', r['x_floor_stack'])
"
