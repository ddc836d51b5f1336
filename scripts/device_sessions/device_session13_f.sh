# Thirteenth session, call f: the pipelined wgmma schedule on the two M = 16 shapes still below
# 1.6x (its 168 registers fit the 3 CTAs an SM that shared memory allows with a 4-stage CTA).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 scripts/bench_wgmma_gemv.py --ms 16 --shapes 24576:1536,7168:2048 \
    --configs p4s2w4,p4s2w4pipe,p2s2w4pipe,p1s1w8,p1s1w8pipe,p1s1w4pipe --json $OUT/wgmma_gemv_m16_pipe.json \
    2>&1 | tee $OUT/wgmma_gemv_m16_pipe.log | python3 -c "
import json, sys
for line in sys.stdin:
    try: r = json.loads(line)
    except Exception: print(line, end=''); continue
    if 'M' not in r: print(r); continue
    ks = sorted((k[:-9] for k in r if k.endswith('_stack_us')), key=lambda k: r[k + '_stack_us'])
    print(r['M'], r['N'], r['K'], 'row', r['rowwise_stack_us'], ' '.join(f'{k}={r[k + \"_stack_us\"]}' for k in ks))
"
