# Sixteenth session, call a: the fifteenth session's unrun review mend (GEMV / fp8_gemm cuda tests),
# the layer-stack benchmark of the tree as it stands, and Nsight Compute on the FP4 wgmma GEMV's two
# M = 16 misses with the shipped configs (no split at N24576 K1536; split 4 at N7168 K2048), to see
# where the stalls sit without the split reduction.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 200 python3 -m pytest -m "cuda and not slow" -q -p no:cacheprovider --timeout=180 -n 4 \
    tests/ops/test_fp4_wgmma_gemv.py tests/ops/test_fp8_wgmma_gemv.py tests/ops/test_fp8_gemm.py 2>&1 | tail -6 | tee $OUT/pytest_cuda_gemv.log
timeout 130 python3 scripts/bench_gemm_stack.py --layers 8 --ms 1,16,64 --json $OUT/gemm_stack.json > $OUT/gemm_stack.log 2>&1
python3 -c "
import json
for line in open('$OUT/gemm_stack.log'):
    try: r = json.loads(line)
    except Exception: print(line, end=''); continue
    if 'M' in r: print(r['op'], r['M'], r['N'], r['K'], 'lowbit', r['lowbit_stack_us'], 'row', r['rowwise_stack_us'], 'tensor', r['tensor_stack_us'], 'x', r['vs_rowwise_stack'], 'floor x', r['x_floor_stack'])
"
for cfg in "16 24576 1536 2 1 4 0" "16 7168 2048 1 4 8 0"; do
  name=ncu_wgmma_$(echo $cfg | tr ' ' '_')
  timeout 120 ncu -k "regex:fp4_wgmma" --launch-skip 2 --launch-count 1 --set full --import-source no -f \
      -o "$OUT/$name" python3 scripts/profile_decode.py wgmma $cfg > "$OUT/${name}_run.log" 2>&1
  ncu -i "$OUT/$name.ncu-rep" --page details --print-details all > "$OUT/${name}_details.txt" 2>&1
  ncu -i "$OUT/$name.ncu-rep" --page source --csv --print-source sass > "$OUT/${name}_sass.csv" 2>&1
  rm -f "$OUT/$name.ncu-rep"
  grep -E "Duration|Registers Per|Achieved Occupancy|Issued Warp|No Eligible|Active Warps Per|Eligible Warps|Theoretical Occ|Block Limit|Memory Throughput|DRAM Throughput" "$OUT/${name}_details.txt" | head -20
done
