#!/usr/bin/env bash
# Session 24, call f: fp4_gemm's re-encode path (no host read since call e) against the fused kernel
# as a layer stack of 4 weights in one CUDA graph (GPU time; the cold single-call timer of call e
# also counts the host's launch time of the path's three launches). Results under $OUT.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 270 python3 scripts/bench_fp4_expand.py --ms 256,512,1024,4096 --stack 4 --json "$OUT/fp4_expand_stack.json" > "$OUT/fp4_expand_stack.log" 2>&1
python3 - "$OUT/fp4_expand_stack.log" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if not line.startswith("{"):
        continue
    r = json.loads(line)
    print(f"M{r['M']:5d} N{r['N']:6d} K{r['K']:6d} MNK {r['M']*r['N']*r['K']/2**34:6.2f}x2^34  cold: fused {r['fused_us']:8.1f} path {r['expand_us']:8.1f} ({r['speedup']:.2f}x)  "
          f"stack: fused {r.get('fused_stack_us', 0):8.1f} path {r.get('expand_stack_us', 0):8.1f} ({r.get('stack_speedup', 0):.2f}x)  rowwise {r['rowwise_us']:7.1f}")
PY
tail -3 "$OUT/fp4_expand_stack.log" | grep -v "^{" 
