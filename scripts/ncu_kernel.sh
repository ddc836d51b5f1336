#!/usr/bin/env bash
# Nsight Compute of one launch of a kernel, summarized: key metrics and where its warps stall.
#
#   bash scripts/ncu_kernel.sh KERNEL_REGEX NAME COMMAND...
#
# Profiles the third launch matching KERNEL_REGEX (--set full) while COMMAND runs, keeps the
# details page ($OUT/NAME_details.txt) and the SASS source page ($OUT/NAME_sass.csv), drops the
# report, and prints the occupancy / throughput lines and scripts/ncu_stall_regions.py's summary.
set -u
regex=$1 name=$2; shift 2
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 150 ncu -k "regex:$regex" --launch-skip 2 --launch-count 1 --set full --import-source no -f \
    -o "$OUT/$name" "$@" > "$OUT/${name}_run.log" 2>&1
ncu -i "$OUT/$name.ncu-rep" --page details --print-details all > "$OUT/${name}_details.txt" 2>&1
ncu -i "$OUT/$name.ncu-rep" --page source --csv --print-source sass > "$OUT/${name}_sass.csv" 2>&1
rm -f "$OUT/$name.ncu-rep"
grep -E "Duration|Registers Per|Achieved Occupancy|Issued Warp|No Eligible|Active Warps Per|Eligible Warps|Theoretical Occ|Block Limit|Memory Throughput|DRAM Throughput|L2 Hit|Waves Per SM|Max Bandwidth|Mem Busy|Executed Ipc" \
    "$OUT/${name}_details.txt" | head -30
python3 scripts/ncu_stall_regions.py "$OUT/${name}_sass.csv" --chunk 80 --top 1.5 | head -50
tail -3 "$OUT/${name}_run.log"
