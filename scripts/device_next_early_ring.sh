#!/usr/bin/env bash
# Prepared for the next session (not yet run): three launch options of the coarse pass, all off --
# the first ring of weight stages issued before the PDL wait (EARLY_RING: the ring fills while x is
# prepared), x boxes only as tall as M (X_ROWS_BOX: at M = 1 256 bytes of x a stage instead of
# 2 KB) and the x sums stored negated (NEG_XSUM: 4 instructions fewer a stage of the per-group
# pass). Their cuda test (bit for bit the plain launch: split, persistent, x resident, short heads,
# both kernels, CUDA-graph replay), the x preparation's negated sums, then fast argmax against the
# default over three alternating rounds. Turn on what wins at M = 1..16 (X_ROWS_BOX only acts at
# M < 8, NEG_XSUM only on INT4), then run the whole cuda tier.
source scripts/device_lib.sh
# (the options' own cuda test, launch_options, runs in device_next_split_span.sh, the call before)
cuda_tests pytest_early.log 150 tests/ops/test_coarse_wgmma.py -k "split_tail or negated"
head_paths head_early 230 --bits 2,4 --ms 1,8,16 --paths "default,early ring,x rows box"
head_paths head_negxs 100 --bits 4 --ms 8,16 --paths "default,neg xsum"
# (thirty-fifth session) both options with 4 candidates a block, where the INT2 target is nearest
head_paths head_combo 100 --bits 2,4 --ms 1,8 --paths "default,early ring x rows box kcand 4"
