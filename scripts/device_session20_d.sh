#!/usr/bin/env bash
# Session 20, call d (#8): the registered benchmark on the final dispatch (use_lean). Results under $OUT.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT/bench"
timeout 75 python3 -m lowbit.cli bench --op gathered_bias --out "$OUT/bench" > "$OUT/bench.log" 2>&1; grep -E "lowbit|wrote|copy" "$OUT/bench.log" | tail -40
