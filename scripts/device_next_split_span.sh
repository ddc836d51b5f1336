#!/usr/bin/env bash
# Prepared in the thirty-fifth session (no H200 lent; not yet run): at M = 64 a spanning program's
# two candidate blocks on two consumer partitions of 8 warps (SPLIT_SPAN, off) instead of one
# partition of 16 that meets at a barrier every stage -- so one partition decodes while the other's
# wgmmas run. Offline sm_90: no spills in either stage loop (624 instructions a 4-stage lap, as the
# shipped 612), 14 / 16 spill instructions a block in the float max-and-mask epilogue (INT2 / INT4).
# The cuda tests of spanning programs (split partitions against the reference and bit for bit the
# plain spanning launch, CUDA-graph replay), then fast argmax at M = 64 against the default over
# three alternating rounds, alone and with 4 candidates a block (the M = 64 epilogue is ~25 us of
# the pass at 8; "split span 104", the second partition at 104 registers, if time allows). If it
# wins, set SPLIT_SPAN = True, then run the whole cuda tier. Last, at M = 16, fast heads of 4 candidates a
# block against the default 8 (INT4 M = 16: 1.35x its floor, target 1.3x; the epilogue is 8 us of
# it) and spanning programs on split partitions. On SmolLM2's head (CPU, scripts/sim_table_coarse.py)
# kcand 4 keeps INT4's fast argmax agreement at 100% (lowbit eval-head, 1024 positions: 99.90%;
# recall@16 98.0 -> 93.7%), INT2's 89.7 -> 89.1%. (~9 min)
source scripts/device_lib.sh
cuda_tests pytest_split_span.log 200 tests/ops/test_coarse_wgmma.py -k "span_two_blocks or launch_options"
head_paths head_split_span 180 --bits 2,4 --ms 64 --paths "default,split span,kcand 4,split span kcand 4"
# at M = 16, both bits: 4 candidates a block, and spanning programs on split partitions (x tiles shared
# by two blocks: a stage's x is 4 KB at NB = 16 beside 8 KB of INT2 codes; one 20-warp CTA an SM
# instead of three of 12)
head_paths head_m16 160 --bits 2,4 --ms 16 --paths "default,kcand 4,span split span"
