#!/usr/bin/env bash
# Prepared in session 22 (not run): Nsight Compute on mma_gemv at fp8 M = 1, N4096 K7168 (RT1 W8,
# the shipped short-launch rule: PDL + ptxas -O1), where fp8_gemm takes 10.3 us in the layer stack
# against 8.15 for a bare PDL read of the same bytes (#9: 1.3x the byte floor is 9.0). What to read:
# achieved occupancy, DRAM throughput over the kernel, the stall reasons (long scoreboard = waiting
# on the weight loads), and the SASS lines holding the stalls (scripts/ncu_stall_regions.py).
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
for cfg in "fp8 1 4096 7168 1 8" "fp8 1 24576 1536 1 2"; do
  name=ncu_mma_gemv_$(echo $cfg | tr ' ' '_')
  timeout 150 ncu -k "regex:mma_gemv" --launch-skip 2 --launch-count 1 --set full --import-source no -f \
      -o "$OUT/$name" python3 scripts/profile_decode.py gemv $cfg > "$OUT/${name}_run.log" 2>&1
  ncu -i "$OUT/$name.ncu-rep" --page details --print-details all > "$OUT/${name}_details.txt" 2>&1
  ncu -i "$OUT/$name.ncu-rep" --page source --csv --print-source sass > "$OUT/${name}_sass.csv" 2>&1
  rm -f "$OUT/$name.ncu-rep"
  grep -E "Duration|Registers Per|Achieved Occupancy|Issued Warp|No Eligible|Active Warps Per|Eligible Warps|Theoretical Occ|Block Limit|Memory Throughput|DRAM Throughput" "$OUT/${name}_details.txt" | head -20
  python3 scripts/ncu_stall_regions.py "$OUT/${name}_sass.csv" 2>&1 | head -30
done
