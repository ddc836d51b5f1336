#!/usr/bin/env bash
# Twenty-eighth session, call a (logs docs/measurements/2026-12-04_session28_a_*): the two prepared,
# untimed fast-mode options -- the selection inside the rerank launch (select.FUSE_SELECT_MAX_M)
# and the candidate epilogue by sorted per-thread heads (gluon_wgmma.EMIT_SORTED; offline sm_90:
# 15-16% fewer epilogue instructions at NB = 8..32). Their GPU-tier tests, then fast argmax with
# each and both against the default on 124160 x 5120 (INT2 / INT4, M = 1..32) and on SmolLM2's
# 49152 x 576 head (M = 1 / 8). Where one wins: FUSE_SELECT_MAX_M = the largest M it wins at;
# EMIT_SORTED = True if it wins at every M (it applies to one-block programs only).
# Outcome: EMIT_SORTED won everywhere and is the default now; the fused selection lost from M = 4
# on (and its values differed from the two launches in the last bits) and was removed after this
# run, so the "fused ..." paths no longer exist in bench_coarse_wgmma.py.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 300 python3 -m pytest tests/ops/test_coarse_head.py tests/ops/test_coarse_wgmma.py -m cuda -q \
  -p no:cacheprovider -n 8 --tb=short -k "select or fused or sorted" > "$OUT/pytest_leads.log" 2>&1
tail -3 "$OUT/pytest_leads.log"
timeout 240 python3 scripts/bench_coarse_wgmma.py --bits 2,4 --ms 1,4,8,16,32 --no-previous \
  --paths "default,fused select,sorted epilogue,fused+sorted" --json "$OUT/head_leads.json" > "$OUT/head_leads.log" 2>&1
cut -c1-300 "$OUT/head_leads.log"
timeout 100 python3 scripts/bench_coarse_wgmma.py --shapes 49152x576 --bits 2,4 --ms 1,8 --no-previous \
  --paths "default,fused+sorted" --json "$OUT/head_small_leads.json" > "$OUT/head_small_leads.log" 2>&1
cut -c1-260 "$OUT/head_small_leads.log"
