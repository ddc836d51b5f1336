#!/usr/bin/env bash
# Thirtieth session, call a: the x preparation as a programmatic dependent launch on by default
# (x_int8.X_PDL) -- the whole cuda tier with it (also the first H200 run after the twenty-ninth
# session's review mend), then fast argmax with the PDL and the plain launch in one run.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 420 python3 -m pytest -m "cuda and not slow" -q -p no:cacheprovider -n 14 --tb=short \
  > "$OUT/pytest_cuda.log" 2>&1; echo "rc=$?"; tail -3 "$OUT/pytest_cuda.log"
grep -E "^(FAILED|ERROR)" "$OUT/pytest_cuda.log" | head -30
timeout 120 python3 scripts/bench_coarse_wgmma.py --bits 2,4 --ms 1,8,16,64 --no-previous \
  --paths "x prep pdl,x prep plain launch" --json "$OUT/head_xpdl.json" > "$OUT/head_xpdl.log" 2>&1
python3 scripts/compare_head_paths.py "$OUT/head_xpdl.log" --base "x prep plain launch"
