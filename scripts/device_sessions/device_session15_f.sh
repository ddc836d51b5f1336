# Fifteenth session, call f: the prefill Gluon kernel (persistent, TMA ring, async wgmma; optionally a
# warp-specialized TMA producer) used at M = 64 / 32 with a deep ring, the way cuBLAS's M = 64 kernel
# runs (ncu, call e: 100 CTAs of 72 weight rows, 12 stages, no split), against the shipped dispatch.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
set -o pipefail
timeout 250 python3 scripts/bench_fp8_wgmma_gemv.py --no-single --ms 64,32 --shapes 7168:16384 --json $OUT/prefill_m64.json \
  --prefill "64:6:1;64:8:1;64:10:1;64:12:1;64:8:0;64:12:0;32:12:1;32:16:1;128:8:1" \
  2>&1 | tee $OUT/prefill_m64.log | cut -c1-200
