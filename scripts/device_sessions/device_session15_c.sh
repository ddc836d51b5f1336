# Fifteenth session, call c: the FP8 wgmma GEMV with the pipelined schedule (PIPE) -- its cuda tests,
# then stack-timer sweeps at M = 64 (and 32) on the five shapes: pipe on / off, splits sized so the
# grid stays resident, register caps.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
set -o pipefail
timeout 120 python3 -m pytest -q -p no:cacheprovider -n 8 --timeout=110 -m cuda tests/ops/test_fp8_wgmma_gemv.py \
  2>&1 | tail -8 | tee $OUT/pytest_cuda.log
B="python3 scripts/bench_fp8_wgmma_gemv.py --no-single"
timeout 170 $B --ms 64,32 --shapes 7168:16384 --json $OUT/sweep_big.json --configs \
s4x64w8p,s4x43w8p,s4x32w8p,s4x32w8,s3x32w8r128,s4x32w8pr168,s4x128w4p,s4x64w4p,s4x64w4,s3x43w4p,s3x43w4,s6x64w4p,s2x64w4p,s3x32w4p \
  2>&1 | tee $OUT/sweep_big.log | cut -c1-300
timeout 60 $B --ms 64 --shapes 2112:7168 --json $OUT/sweep_2112.json --configs s4x8w4p,s4x14w4p,s4x8w8p,s4x14w8p,s4x56w4p,s4x28w4p 2>&1 | tail -1 | cut -c1-300
timeout 60 $B --ms 64 --shapes 4096:7168 --json $OUT/sweep_4096.json --configs s4x14w4p,s4x28w4p,s4x14w8p,s4x28w8p,s4x56w4p 2>&1 | tail -1 | cut -c1-300
timeout 60 $B --ms 64 --shapes 7168:2048 --json $OUT/sweep_7168_2048.json --configs s4x16w4p,s4x8w4p,s4x8w8p,s4x16w8p,s4x4w8p 2>&1 | tail -1 | cut -c1-300
timeout 60 $B --ms 64 --shapes 24576:1536 --json $OUT/sweep_24576.json --configs s4x12w8p,s4x12w4p,s3x6w8p,s4x12w8,s4x6w4p 2>&1 | tail -1 | cut -c1-300
