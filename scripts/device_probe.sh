#!/usr/bin/env bash
# A short GPU call: the tensor-core gathered tests, the picked configs on all 36 shapes, and
# Nsight Compute on the small K4096 grid.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 100 python3 -m pytest tests/ops/test_gathered_mma.py -m cuda -q -p no:cacheprovider > "$OUT/pytest_mma.log" 2>&1
tail -2 "$OUT/pytest_mma.log"
timeout 130 python3 scripts/bench_gathered_mma.py --rep 20 --picked > "$OUT/sweep.log" 2>&1; cat "$OUT/sweep.log"
timeout 60 ncu -k regex:gathered_mma --launch-skip 2 --launch-count 1 --section SpeedOfLight --section WarpStateStats \
  --section Occupancy --section LaunchStats python3 scripts/profile_decode.py gathered 4096 1 8 > "$OUT/ncu_k4096_b1_t8.txt" 2>&1
grep -E "Duration|Throughput|Stall|Warp Cycles|Achieved|Registers|Block Size|Grid Size|Issued" "$OUT/ncu_k4096_b1_t8.txt" | head -40
