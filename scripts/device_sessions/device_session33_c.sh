#!/usr/bin/env bash
# Thirty-third session, call c: Nsight Compute on the per-group (INT4) warp-specialized coarse pass
# at M = 8 and 16 -- call b found its decode + wgmma + per-group retire exposed by ~3 us at NB = 8
# and ~13 us at NB = 16 over the bare ring, the epilogue only 3-4.5 us: where do its warps wait?
# Then INT2 at M = 1 / 8 against the persistent launch (the producer streams the next block during
# the epilogue), three alternating rounds.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
for m in 8 16; do
  bash scripts/ncu_kernel.sh _coarse_ws_kernel "ncu_int4_m$m" python3 scripts/profile_coarse_wgmma.py 4 $m group
done
timeout 150 python3 scripts/bench_coarse_wgmma.py --bits 2 --ms 1,8 --no-previous --rounds 3 \
  --paths "default,table persist" --json "$OUT/head_c.json" > "$OUT/head_c.log" 2>&1
echo "bench rc=$?"; python3 scripts/compare_head_paths.py "$OUT/head_c.log"
