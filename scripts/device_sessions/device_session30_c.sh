#!/usr/bin/env bash
# Thirtieth session, call c: (1) do two draft heads race on two streams (scripts/probe_stream_race.py:
# the per-device ticket / counter buffers); (2) fast argmax on the final defaults (x preparation as
# a PDL launch), 124160 x 5120 at M = 1..64 and SmolLM2's 49152 x 576, for the README.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 120 python3 scripts/probe_stream_race.py --iters 300 --json "$OUT/stream_race.json" > "$OUT/stream_race.log" 2>&1
tail -4 "$OUT/stream_race.log"
timeout 150 python3 scripts/bench_coarse_wgmma.py --bits 2,4 --ms 1,4,8,16,32,64 --no-previous --paths default \
  --json "$OUT/head_final.json" > "$OUT/head_final.log" 2>&1
timeout 60 python3 scripts/bench_coarse_wgmma.py --shapes 49152x576 --bits 2,4 --ms 1,8,16 --no-previous --paths default \
  --json "$OUT/head_final_short.json" > "$OUT/head_final_short.log" 2>&1
python3 scripts/compare_head_paths.py "$OUT/head_final.log" "$OUT/head_final_short.log"
