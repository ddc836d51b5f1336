#!/usr/bin/env bash
# Prepared in the thirty-sixth session (no H200 lent; not yet run): the certified head's fp32 band
# kernels without their spills (offline sm_90): the epilogue's per-group loop no longer software-
# pipelined (triton.EPILOGUE_STAGES = 1: INT8 g64 at K = 5120 spilled 416-488 bytes at BM = 32 / 64
# and took 220 registers at BM = 16, now none and 141), and NVFP4 rows on the dot path in steps of
# 32 bytes (triton.NVFP4_DOT_BK: 40-376 bytes of spills at 64, none at 32). Both are on; their
# correctness is the cuda tier's (tests/ops/test_coarse_head.py, tests/nn/test_draft_head.py:
# scripts/device_next_cuda_tier.sh). Here the A/B against the previous settings (coarse pass alone,
# and certified INT8 topk(16) end to end against cuBLAS + torch.topk) at M = 16 / 32 / 64 on both
# benchmark heads. If a previous setting wins somewhere, restore it there. (~4-6 min)
source scripts/device_lib.sh
timeout 330 python3 scripts/bench_band_kernels.py --rounds 3 --json "$OUT/band.json" > "$OUT/band.log" 2>&1
echo "band bench rc=$?"; tail -40 "$OUT/band.log"
