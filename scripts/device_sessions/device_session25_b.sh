#!/usr/bin/env bash
# Session 25, call b: the INT2 coarse pass's TMA stream by geometry (scripts/probe_coarse_stream.py).
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 400 python3 scripts/probe_coarse_stream.py --nb 8,16 --json "$OUT/probe_stream.json" > "$OUT/probe_stream.log" 2>&1
cat "$OUT/probe_stream.log" | tail -30
