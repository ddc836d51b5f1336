#!/usr/bin/env bash
# Seventh session, last GPU call: coarse-head + draft-head cuda tests with launches of up to 32
# rows (four B tiles), then band vs tensor-core launches of 16 / 32 at M = 32 / 64. $OUT.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 150 python3 -m pytest tests/ops/test_coarse_head.py tests/nn/test_draft_head.py tests/ops/test_mma_gemv.py -m cuda -q -p no:cacheprovider \
  -n 8 --timeout=300 > "$OUT/pytest_coarse.log" 2>&1; tail -2 "$OUT/pytest_coarse.log"
timeout 150 python3 scripts/bench_coarse_wide_m.py --json "$OUT/wide_m.json" --ms 32,64 --bits ${BITS:-2,4,8} \
  > "$OUT/wide_m.log" 2>&1; grep '^{' "$OUT/wide_m.log" | python3 -c "
import sys, json
for l in sys.stdin:
    r = json.loads(l)
    print(r.get('M'), r.get('bits'), r.get('variant', r.get('impl')), r.get('coarse_us', r.get('us')), r.get('argmax_us'), r.get('tc_logits_identical'), r.get('error', ''))"
