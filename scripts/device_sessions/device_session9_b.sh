#!/usr/bin/env bash
# Ninth session, closing GPU call: the full cuda tier on the final tree, then ncu of the fused
# certified argmax on SmolLM2's head at M = 64 and 16 (where its extra time over a bare tl.dot
# pass goes; needs .realhead/ from scripts/real_head_data.py, carried). Results under $OUT.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 260 python3 -m pytest -m "cuda and not slow" -q -p no:cacheprovider --timeout=300 -n 8 \
  > "$OUT/pytest_cuda.log" 2>&1; tail -4 "$OUT/pytest_cuda.log"
for m in 64 16; do
  timeout 90 ncu -k regex:fused_argmax --launch-skip 3 --launch-count 1 --section SpeedOfLight \
    --section WarpStateStats --section Occupancy --section LaunchStats --section SchedulerStats \
    python3 scripts/profile_fused_argmax.py .realhead/smollm2_head.pt.xz $m > "$OUT/ncu_fused_m$m.txt" 2>&1
  grep -E "Duration|Throughput|Stall|Warp Cycles|Achieved|Registers|Grid Size|Issued|Eligible|Theoretical Occ" \
    "$OUT/ncu_fused_m$m.txt" | head -30
done
