#!/usr/bin/env bash
# Thirtieth session, call b: (1) the selection prefetching the rerank's weight rows into L2
# (select.SELECT_PREFETCH: the picks, or every candidate of the selected blocks) -- its cuda tests,
# then fast argmax against no prefetch in one run; (2) the coarse pass's wave quantization: the
# same head at N = 792 / 924 / 970 / 1056 / 1188 blocks of 128 rows (792 = 3 x 264 = 2 x 396: two /
# three CTAs an SM on 132 SMs), time per block against N. The prefetch lost (+10-17 us at every M)
# and its code, tests and bench paths were removed after this call; the logs stay.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 150 python3 -m pytest tests/ops/test_coarse_head.py tests/nn/test_draft_head.py -m cuda -q -p no:cacheprovider \
  -n 14 --tb=short -k "fused_select or select_forms or fast or graph or compile" > "$OUT/pytest_prefetch.log" 2>&1
tail -2 "$OUT/pytest_prefetch.log"; grep -E "^(FAILED|ERROR)" "$OUT/pytest_prefetch.log" | head -20
timeout 150 python3 scripts/bench_coarse_wgmma.py --bits 2,4 --ms 1,4,8,16,64 --no-previous \
  --paths "default,prefetch picks,prefetch blocks" --json "$OUT/head_prefetch.json" > "$OUT/head_prefetch.log" 2>&1
timeout 120 python3 scripts/bench_coarse_wgmma.py --shapes 101376x5120,118272x5120,124160x5120,135168x5120,152064x5120 \
  --bits 2,4 --ms 1,8 --no-previous --paths default --json "$OUT/head_waves.json" > "$OUT/head_waves.log" 2>&1
python3 scripts/compare_head_paths.py "$OUT/head_prefetch.log"
python3 - <<'PY'
import json, os
for r in (json.loads(l) for l in open(os.path.join(os.environ["OUT"], "head_waves.log")) if l.startswith("{")):
    if r.get("impl") == "default":
        blocks = int(r["shape"].split("x")[0]) // 128
        print("waves", r["bits"], r["M"], blocks, "coarse", r["coarse_us"], "per block ns", round(1000 * r["coarse_us"] / blocks, 1),
              "argmax", r["argmax_us"])
PY
