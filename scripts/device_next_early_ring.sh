#!/usr/bin/env bash
# Prepared for the next session (not yet run): the warp-specialized coarse pass's first ring of
# weight stages issued before its PDL wait (gluon_wgmma.EARLY_RING, off). Its cuda test (bit for
# bit the plain order: split, persistent, short heads, both kernels, CUDA-graph replay), then fast
# argmax against the plain order over three alternating rounds. If "early ring" wins at M = 1..16
# on both bit widths, turn EARLY_RING on and run the whole cuda tier.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 150 python3 -m pytest -m cuda -q -p no:cacheprovider -n 14 --tb=short tests/ops/test_coarse_wgmma.py \
  -k "early_ring or split_tail" > "$OUT/pytest_early.log" 2>&1; echo "rc=$?"; tail -3 "$OUT/pytest_early.log"
grep -E "^(FAILED|ERROR)" "$OUT/pytest_early.log" | head -20
grep -m1 -B2 -A30 "^____" "$OUT/pytest_early.log" | head -50
timeout 300 python3 scripts/bench_coarse_wgmma.py --bits 2,4 --ms 1,8,16,32 --no-previous --rounds 3 \
  --paths "default,early ring" --json "$OUT/head_early.json" > "$OUT/head_early.log" 2>&1
echo "bench rc=$?"; python3 scripts/compare_head_paths.py "$OUT/head_early.log"
