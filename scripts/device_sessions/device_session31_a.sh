#!/usr/bin/env bash
# Thirty-first session, call a: the coarse-pass and draft-head cuda tests (the split tail's
# per-device partial-sum scratch of the thirtieth session's review mend had not run on the H200;
# the per-group kernel's pipelined planes, WS_PIPE_GROUP, are new), then fast argmax: INT4 default
# against "ws pipe", INT2 default against "no split", in one run.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 300 python3 -m pytest tests/ops/test_coarse_wgmma.py tests/nn/test_draft_head.py -m cuda -q \
  -p no:cacheprovider -n 14 --tb=short > "$OUT/pytest_coarse.log" 2>&1; echo "rc=$?"; tail -3 "$OUT/pytest_coarse.log"
grep -E "^(FAILED|ERROR)" "$OUT/pytest_coarse.log" | head -30
timeout 200 python3 scripts/bench_coarse_wgmma.py --bits 2,4 --ms 1,8,16,32 --no-previous \
  --paths "default,ws pipe,no split" --json "$OUT/head_pipe.json" > "$OUT/head_pipe.log" 2>&1
python3 scripts/compare_head_paths.py "$OUT/head_pipe.log"
