#!/usr/bin/env bash
# Thirty-third session, call c: Nsight Compute on the per-group (INT4) warp-specialized coarse pass
# at M = 8 and 16 -- call b found its decode + wgmma + per-group retire exposed by ~3 us at NB = 8
# and ~13 us at NB = 16 over the bare ring, the epilogue only 3-4.5 us: where do its warps wait?
# Then INT2 at M = 1 / 8 against the persistent launch (the producer streams the next block during
# the epilogue), three alternating rounds.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
for m in 8 16; do
  name=ncu_int4_m$m
  timeout 150 ncu -k "regex:_coarse_ws_kernel" --launch-skip 2 --launch-count 1 --set full --import-source no -f \
      -o "$OUT/$name" python3 scripts/profile_coarse_wgmma.py 4 $m group > "$OUT/${name}_run.log" 2>&1
  ncu -i "$OUT/$name.ncu-rep" --page details --print-details all > "$OUT/${name}_details.txt" 2>&1
  ncu -i "$OUT/$name.ncu-rep" --page source --csv --print-source sass > "$OUT/${name}_sass.csv" 2>&1
  rm -f "$OUT/$name.ncu-rep"
  grep -E "Duration|Registers Per|Achieved Occupancy|Issued Warp|No Eligible|Active Warps Per|Eligible Warps|Theoretical Occ|Block Limit|Memory Throughput|DRAM Throughput|L2 Hit|Waves Per SM|Max Bandwidth|Mem Busy|Executed Ipc" "$OUT/${name}_details.txt" | head -30
  python3 scripts/ncu_stall_regions.py "$OUT/${name}_sass.csv" --chunk 80 --top 1.5 | head -50
  tail -3 "$OUT/${name}_run.log"
done
timeout 150 python3 scripts/bench_coarse_wgmma.py --bits 2 --ms 1,8 --no-previous --rounds 3 \
  --paths "default,table persist" --json "$OUT/head_c.json" > "$OUT/head_c.log" 2>&1
echo "bench rc=$?"; python3 scripts/compare_head_paths.py "$OUT/head_c.log"
