#!/usr/bin/env bash
# Prepared for the next session (not yet run): what each operand costs the INT2 pass's TMA ring.
# The bare ring measured 1.19-1.31x the INT2 floor in the thirty-third session, against ~1.0x for
# a codes-only ring in session 25 (older geometry). Ring mode (consumers only wait and release,
# shipped epilogue), 4 slots, one block a program, the shipped register cap; feeds: as shipped
# (codes + group codes + x tiles a stage), without the group codes, without x, codes only, and the
# block's group codes in one load at its start (three CTAs an SM at NB = 8, two at NB = 16).
# If "words per block" is much faster than "shipped" at NB = 8, build it into _coarse_ws_kernel.
source scripts/device_lib.sh
timeout 240 python3 scripts/probe_coarse_ring.py --ms 1,8,16 --modes ring --stages 4 --kcands 8 --head 0 \
  --feeds "shipped,no words,no x,codes only,words per block" --json "$OUT/ring_feeds.json" \
  > "$OUT/ring_feeds.log" 2>&1; echo "rc=$?"; cat "$OUT/ring_feeds.log" | tail -25
# and (thirty-fourth session) the persistent whole-row pass at three programs an SM where the
# epilogue is longest: INT2 M = 16 / 32 (its epilogue 7.5 / 12.7 us of the pass, session 33; the
# persistent producer streams the next block meanwhile). Measured only at M = 1 / 8 so far (+2.7 /
# +2.4 us, session 33 call e)
head_paths head_persist 150 --bits 2 --ms 16,32 --paths "default,table persist 3"
