#!/usr/bin/env bash
# Twenty-ninth session, call c: the launches after the coarse pass -- its PDL trigger after the
# program's last block (gluon_wgmma.LATE_TRIGGER, now LATE_TRIGGER_MIN_NB), the selection without its early trigger, both
# launches without PDL, the selection keyed by token (+ 16 warps) -- fast argmax against the default
# on 124160 x 5120 (M = 1..32) and SmolLM2's 49152 x 576 (M = 1..16).
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
P="default,token keys,token keys 16 warps,tail no PDL,select no trigger,coarse late trigger"
timeout 330 python3 scripts/bench_coarse_wgmma.py --bits 2,4 --ms 1,4,8,16,32 --no-previous \
  --paths "$P" --json "$OUT/head_trigger.json" > "$OUT/head_trigger.log" 2>&1
cut -c1-150 "$OUT/head_trigger.log"
timeout 150 python3 scripts/bench_coarse_wgmma.py --shapes 49152x576 --bits 2,4 --ms 1,8,16 --no-previous \
  --paths "$P" --json "$OUT/head_trigger_short.json" > "$OUT/head_trigger_short.log" 2>&1
cut -c1-150 "$OUT/head_trigger_short.log"
