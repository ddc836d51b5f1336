# Nineteenth session, call c: Nsight Compute on the whole-row INT2 coarse pass (byte-permute decode,
# ring-unrolled warp-specialized kernel) at M = 1 and 16 -- neither fewer instructions (call a) nor
# contiguous stages (call b) moved it much, so where do its warps wait?
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
for m in 1 16; do
  name=ncu_prmt_m$m
  timeout 150 ncu -k "regex:_coarse_table_ws" --launch-skip 2 --launch-count 1 --set full --import-source no -f \
      -o "$OUT/$name" python3 scripts/profile_coarse_wgmma.py 2 $m table > "$OUT/${name}_run.log" 2>&1
  ncu -i "$OUT/$name.ncu-rep" --page details --print-details all > "$OUT/${name}_details.txt" 2>&1
  ncu -i "$OUT/$name.ncu-rep" --page source --csv --print-source sass > "$OUT/${name}_sass.csv" 2>&1
  rm -f "$OUT/$name.ncu-rep"
  grep -E "Duration|Registers Per|Achieved Occupancy|Issued Warp|No Eligible|Active Warps Per|Eligible Warps|Theoretical Occ|Block Limit|Memory Throughput|DRAM Throughput|L2 Hit|Waves Per SM|Dynamic Shared|Max Bandwidth|Mem Busy" "$OUT/${name}_details.txt" | head -30
  python3 scripts/ncu_stall_regions.py "$OUT/${name}_sass.csv" --chunk 80 --top 1.5 | head -60
  tail -3 "$OUT/${name}_run.log"
done
