#!/usr/bin/env bash
# Session 20, call b (#8): LEAN without the prefetch past a warp's last chunk (peeled tail) -- the
# picked config against the old kernel on all 36 shapes, other geometries / deeper rings on the
# shapes with B*T >= 2048, the registered benchmark (`lowbit bench --op gathered_bias`), then the
# whole cuda tier. Results under $OUT.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT" "$OUT/ab" "$OUT/deep" "$OUT/bench"
OUT="$OUT/ab" timeout 90 python3 scripts/bench_gathered_mma.py --picked --variants old > "$OUT/ab.log" 2>&1; cat "$OUT/ab.log"
OUT="$OUT/deep" timeout 90 python3 scripts/bench_gathered_mma.py --min-bt 2048 --rep 20 \
  --configs 1x8x1x1,2x2x2x1,2x4x1x1,2x4x2x1,1x8x2x1,1x16x1x1,1x8x1x0,1x8x2x0,2x8x1x0 > "$OUT/deep.log" 2>&1
cat "$OUT/deep.log"
timeout 150 python3 -m lowbit.cli bench --op gathered_bias --out "$OUT/bench" > "$OUT/bench.log" 2>&1; tail -45 "$OUT/bench.log"
timeout 230 python3 -m pytest -m "cuda and not slow" -q -p no:cacheprovider -n 8 > "$OUT/pytest_cuda_full.log" 2>&1
tail -15 "$OUT/pytest_cuda_full.log"
