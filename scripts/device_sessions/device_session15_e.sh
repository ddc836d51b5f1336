# Fifteenth session, call e: why M = 64 is slower (scripts/probe_fp8_m64.py): layer-stack times of the
# probe variants, then Nsight Compute (memory / scheduler / warp-state sections) on four of them.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
set -o pipefail
timeout 120 python3 scripts/probe_fp8_m64.py 2>&1 | tee $OUT/probe.log
for v in gluon_m64_w4s2 gluon_m16_nb64_w4s2 triton_m64 scaled_mm_m64; do
  timeout 90 ncu --launch-skip 3 --launch-count 1 -k "regex:fp8|gemm|sm90|cutlass|xmma" --section SpeedOfLight \
    --section MemoryWorkloadAnalysis --section SchedulerStats --section WarpStateStats --section Occupancy \
    --section LaunchStats python3 scripts/probe_fp8_m64.py $v > $OUT/ncu_$v.txt 2>&1
  grep -E "^  [a-z_]|Duration|Throughput|Registers|Achieved Occupancy|Block Limit|Issued Warp|No Eligible|Eligible Warps|Active Warps|L2 Hit|Mem Busy|Max Bandwidth|Mem Pipes|Grid Size|Stall" $OUT/ncu_$v.txt | head -40
done
