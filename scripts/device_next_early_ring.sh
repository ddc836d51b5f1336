#!/usr/bin/env bash
# Prepared for the next session (not yet run): three launch options of the coarse pass, all off --
# the first ring of weight stages issued before the PDL wait (EARLY_RING: the ring fills while x is
# prepared), x boxes only as tall as M (X_ROWS_BOX: at M = 1 256 bytes of x a stage instead of
# 2 KB) and the x sums stored negated (NEG_XSUM: 4 instructions fewer a stage of the per-group
# pass). Their cuda test (bit for bit the plain launch: split, persistent, x resident, short heads,
# both kernels, CUDA-graph replay), the x preparation's negated sums, then fast argmax against the
# default over three alternating rounds. Turn on what wins at M = 1..16 (X_ROWS_BOX only acts at
# M < 8, NEG_XSUM only on INT4), then run the whole cuda tier.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
# (the options' own cuda test, launch_options, runs in device_next_split_span.sh, the call before)
timeout 150 python3 -m pytest -m cuda -q -p no:cacheprovider -n 14 --tb=short tests/ops/test_coarse_wgmma.py \
  -k "split_tail or negated" > "$OUT/pytest_early.log" 2>&1; echo "rc=$?"
tail -3 "$OUT/pytest_early.log"; grep -E "^(FAILED|ERROR)" "$OUT/pytest_early.log" | head -20
grep -m1 -B2 -A30 "^____" "$OUT/pytest_early.log" | head -50
timeout 230 python3 scripts/bench_coarse_wgmma.py --bits 2,4 --ms 1,8,16 --no-previous --rounds 3 \
  --paths "default,early ring,x rows box" --json "$OUT/head_early.json" > "$OUT/head_early.log" 2>&1
echo "bench rc=$?"; python3 scripts/compare_head_paths.py "$OUT/head_early.log"
timeout 100 python3 scripts/bench_coarse_wgmma.py --bits 4 --ms 8,16 --no-previous --rounds 3 \
  --paths "default,neg xsum" --json "$OUT/head_negxs.json" > "$OUT/head_negxs.log" 2>&1
echo "bench rc=$?"; python3 scripts/compare_head_paths.py "$OUT/head_negxs.log"
# (thirty-fifth session) both options with 4 candidates a block, where the INT2 target is nearest
timeout 100 python3 scripts/bench_coarse_wgmma.py --bits 2,4 --ms 1,8 --no-previous --rounds 3 \
  --paths "default,early ring x rows box kcand 4" --json "$OUT/head_combo.json" > "$OUT/head_combo.log" 2>&1
echo "bench rc=$?"; python3 scripts/compare_head_paths.py "$OUT/head_combo.log"
