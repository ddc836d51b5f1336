#!/usr/bin/env bash
# Twenty-seventh session, call f: the whole cuda tier on the final tree (programs spanning two
# blocks at NB = 64 where the plane has >= 8 stages, stage-major per-group words), then SmolLM2's
# short-K head at M = 64 with the defaults (one block a program there) against one block a program.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 330 python3 -m pytest -m "cuda and not slow" -q -p no:cacheprovider -n 8 --tb=short > "$OUT/pytest_cuda.log" 2>&1
tail -8 "$OUT/pytest_cuda.log"
timeout 60 python3 scripts/bench_coarse_wgmma.py --shapes 49152x576 --bits 2,4 --ms 64 --no-previous \
  --paths "default,one block" --json "$OUT/head_small.json" > "$OUT/head_small.log" 2>&1
cut -c1-260 "$OUT/head_small.log"
