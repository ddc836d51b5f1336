#!/usr/bin/env bash
# Thirty-first session, call e: Nsight Compute on the per-group coarse pass (INT4, 124160 x 5120
# g64, final defaults) at M = 8 (NB = 8, two CTAs an SM) and M = 16 (NB = 16, three CTAs an SM),
# where fast argmax costs 106.5 vs 118.0 us: is NB = 16 bound by instruction issue (the per-group
# epilogue grows with NB) or by memory? What to read: DRAM throughput, issue slots busy, eligible
# warps, the stall reasons and the SASS lines holding them (scripts/ncu_stall_regions.py).
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
for m in 16 8; do
  name=ncu_int4_m$m
  timeout 120 ncu -k "regex:_coarse_ws_kernel" --launch-skip 2 --launch-count 1 --set full --import-source no -f \
      -o "$OUT/$name" python3 scripts/profile_coarse_wgmma.py 4 $m > "$OUT/${name}_run.log" 2>&1
  ncu -i "$OUT/$name.ncu-rep" --page details --print-details all > "$OUT/${name}_details.txt" 2>&1
  ncu -i "$OUT/$name.ncu-rep" --page source --csv --print-source sass > "$OUT/${name}_sass.csv" 2>&1
  rm -f "$OUT/$name.ncu-rep"
  echo "== M = $m"
  grep -E "Duration|Registers Per|Achieved Occupancy|Issue Slots Busy|Issued Warp|No Eligible|Eligible Warps|Theoretical Occ|Memory Throughput|DRAM Throughput|L2 Hit" "$OUT/${name}_details.txt" | head -20
  python3 scripts/ncu_stall_regions.py "$OUT/${name}_sass.csv" 2>&1 | head -24
done
