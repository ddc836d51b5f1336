# Thirteenth session, call c: Nsight Compute on the wgmma FP4 GEMV at M = 16 (N24576 K1536, the
# case furthest from 1.6x), then a second config sweep of the M = 16 shapes (8 warps, pipelined).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
for cfg in "16 24576 1536 1 3 4 0" "1 24576 1536 1 3 4 0"; do
  name=ncu_wgmma_$(echo $cfg | tr ' ' '_')
  timeout 150 ncu -k "regex:fp4_wgmma" --launch-skip 2 --launch-count 1 --set full --import-source no -f \
      -o "$OUT/$name" python3 scripts/profile_decode.py wgmma $cfg > "$OUT/${name}_run.log" 2>&1
  ncu -i "$OUT/$name.ncu-rep" --page details --print-details all > "$OUT/${name}_details.txt" 2>&1
  ncu -i "$OUT/$name.ncu-rep" --page source --csv --print-source sass > "$OUT/${name}_sass.csv" 2>&1
  rm -f "$OUT/$name.ncu-rep"
done
python3 scripts/bench_wgmma_gemv.py --ms 16 --configs p1s1w4,p1s1w8,p1s1w4pipe,p1s1w8pipe,p2s2w8,p2s2w8pipe,p4s2w8 \
    --json $OUT/wgmma_gemv_m16.json 2>&1 | tee $OUT/wgmma_gemv_m16.log | python3 -c "
import json, sys
for line in sys.stdin:
    try: r = json.loads(line)
    except Exception: print(line, end=''); continue
    if 'M' not in r: print(r); continue
    ks = sorted((k[:-9] for k in r if k.endswith('_stack_us')), key=lambda k: r[k + '_stack_us'])
    print(r['M'], r['N'], r['K'], 'row', r['rowwise_stack_us'], ' '.join(f'{k}={r[k + \"_stack_us\"]}' for k in ks), 'errmax', max(v for k, v in r.items() if k.endswith('_err')))
"
