#!/usr/bin/env bash
# Thirty-third session, call a: the candidate epilogue over int32 keys (EMIT_INT_KEYS: each
# round's maximum a warp redux) -- its cuda tests, then fast argmax against the float-key rounds
# over three alternating rounds (--rounds, its first H200 run), and the tail probe with two new
# rows: the chain's x preparation (coarse pass with x cached) and the candidate epilogue's share
# of the pass (kcand 8 vs 0).
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 150 python3 -m pytest -m cuda -q -p no:cacheprovider -n 14 --tb=short tests/ops/test_coarse_wgmma.py \
  -k "epilogue_forms or mirror or span or split_tail" tests/nn/test_draft_head.py \
  > "$OUT/pytest_emit.log" 2>&1; echo "rc=$?"; tail -3 "$OUT/pytest_emit.log"
grep -E "^(FAILED|ERROR)" "$OUT/pytest_emit.log" | head -20
grep -m1 -B2 -A30 "^____" "$OUT/pytest_emit.log" | head -50
timeout 240 python3 scripts/bench_coarse_wgmma.py --bits 2,4 --ms 1,8,16,32 --no-previous --rounds 3 \
  --paths "default,float-key epilogue" --json "$OUT/head_a.json" > "$OUT/head_a.log" 2>&1
echo "bench rc=$?"; python3 scripts/compare_head_paths.py "$OUT/head_a.log"
timeout 150 python3 scripts/probe_fast_tail.py --ms 1,8,16 --bits 2,4 --json "$OUT/tail_a.json" \
  > "$OUT/tail_a.log" 2>&1; echo "probe rc=$?"; tail -8 "$OUT/tail_a.log"
