#!/usr/bin/env bash
# Seventh session, last GPU call: coarse-head cuda tests (schedule 2 added), then the A/B of
# schedule 2 (code vectors one step ahead) against the shipped table. Results under $OUT.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 120 python3 -m pytest tests/ops/test_coarse_head.py -m cuda -q -p no:cacheprovider -n 8 --timeout=300 \
  > "$OUT/pytest_coarse.log" 2>&1; tail -2 "$OUT/pytest_coarse.log"
timeout 300 python3 scripts/bench_coarse_prefetch.py --json "$OUT/prefetch.json" --ms 1,8,16 \
  --variants "table,p2 caps,p2 int4nocap,p2 int4cap72" > "$OUT/prefetch.log" 2>&1
grep '^{' "$OUT/prefetch.log" | python3 -c "
import sys, json
for l in sys.stdin:
    r = json.loads(l)
    print(r.get('M'), r.get('bits'), r.get('variant', r.get('impl')), r.get('coarse_us', r.get('us')), r.get('argmax_us'), r.get('logits_identical_to_first'), r.get('error', ''))"
