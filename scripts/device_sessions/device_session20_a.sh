#!/usr/bin/env bash
# (Ran on the commit that still had the CONTIG option; the contig variant was removed after this call.)
# Session 20, call a (#8): the LEAN gathered kernel (scale pair convert, unmasked loads) -- its
# cuda tests, then all 36 shapes: the picked config with LEAN on and off in the same run, then the
# auto-config sweep with LEAN on. Results under $OUT.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > "$OUT/gpu.txt" 2>&1
timeout 240 python3 -m pytest tests/ops/test_gathered.py tests/ops/test_gathered_mma.py tests/nn/test_markov.py \
  -m cuda -q -p no:cacheprovider -n 4 > "$OUT/pytest_gathered.log" 2>&1; tail -3 "$OUT/pytest_gathered.log"
mkdir -p "$OUT/ab" "$OUT/auto"
OUT="$OUT/ab" timeout 200 python3 scripts/bench_gathered_mma.py --picked --variants old,contig > "$OUT/ab.log" 2>&1; cat "$OUT/ab.log"
OUT="$OUT/auto" timeout 240 python3 scripts/bench_gathered_mma.py > "$OUT/auto.log" 2>&1; cat "$OUT/auto.log"
mkdir -p "$OUT/deep"
OUT="$OUT/deep" timeout 200 python3 scripts/bench_gathered_mma.py --configs 1x8x2x0,1x8x4x0,1x4x2x0,2x4x1x0,2x2x2x1 --variants contig > "$OUT/deep.log" 2>&1; cat "$OUT/deep.log"
timeout 120 python3 scripts/probe_gather_bandwidth.py > "$OUT/probe_bw.log" 2>&1; cat "$OUT/probe_bw.log"
