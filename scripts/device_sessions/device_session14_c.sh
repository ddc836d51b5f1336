# Fourteenth session, call c: the coarse-wgmma cuda tests after the fp32-rounded x product, then
# Nsight Compute of the coarse pass at M = 64 and M = 16 (INT2, 124160 x 5120).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
set -o pipefail
timeout 150 python3 -m pytest -q -p no:cacheprovider --timeout=120 tests/ops/test_coarse_wgmma.py -m cuda 2>&1 | tail -30 | tee $OUT/pytest_coarse_wgmma.log
for m in 64 16; do
  timeout 150 ncu -k "regex:_coarse_wgmma" --launch-skip 2 --launch-count 1 --section SpeedOfLight --section Occupancy \
    --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
    --section LaunchStats python3 scripts/profile_coarse_wgmma.py 2 $m > $OUT/ncu_m$m.txt 2>&1
  grep -E "Duration|Throughput|Registers|Achieved Occupancy|Theoretical Occupancy|Block Limit|Stall|Issued Warp|No Eligible|Eligible Warps|Active Warps|L2 Hit|Mem Busy|Max Bandwidth|Pipe|Shared Memory Configuration|Dynamic Shared" $OUT/ncu_m$m.txt | head -60
done
