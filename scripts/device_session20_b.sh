#!/usr/bin/env bash
# Session 20, call b (#8): LEAN without the prefetch past a warp's last chunk (peeled tail) -- the
# gathered cuda tests, the picked config against the old kernel and the CONTIG order on all 36
# shapes, then deeper rings / other geometries on the shapes with B*T >= 2048. Results under $OUT.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT" "$OUT/ab" "$OUT/deep"
timeout 240 python3 -m pytest tests/ops/test_gathered.py tests/ops/test_gathered_mma.py tests/nn/test_markov.py \
  -m cuda -q -p no:cacheprovider -n 4 > "$OUT/pytest_gathered.log" 2>&1; tail -2 "$OUT/pytest_gathered.log"
OUT="$OUT/ab" timeout 200 python3 scripts/bench_gathered_mma.py --picked --variants old,contig > "$OUT/ab.log" 2>&1; cat "$OUT/ab.log"
OUT="$OUT/deep" timeout 200 python3 scripts/bench_gathered_mma.py --min-bt 2048 \
  --configs 1x8x1x1,2x2x2x1,2x4x1x1,2x4x2x1,1x8x2x1,1x16x1x1,1x8x1x0,1x8x2x0,2x8x1x0 --variants contig > "$OUT/deep.log" 2>&1
cat "$OUT/deep.log"
