#!/usr/bin/env bash
# Twenty-ninth session, call g: the x preparation as a programmatic dependent launch itself
# (x_int8.X_PDL: its CTAs placed while the kernel before it drains) -- the coarse-pass and draft-head
# cuda tests with it (cut by the 150 s timeout at ~75%, no failure: the script ran with X_PDL = True;
# it is False now), then fast argmax against the plain launch on 124160 x 5120 and 49152 x 576
# (the paths now name both forms explicitly; the run compared "default" = PDL with the plain one).
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 150 python3 -m pytest tests/ops/test_coarse_wgmma.py tests/nn/test_draft_head.py -m cuda -q \
  -p no:cacheprovider -n 14 --tb=short > "$OUT/pytest_xpdl.log" 2>&1; tail -2 "$OUT/pytest_xpdl.log"
grep -E "^(FAILED|ERROR)" "$OUT/pytest_xpdl.log" | head -20
timeout 150 python3 scripts/bench_coarse_wgmma.py --bits 2,4 --ms 1,4,8,16,64 --no-previous \
  --paths "x prep plain launch,x prep pdl" --json "$OUT/head_xpdl.json" > "$OUT/head_xpdl.log" 2>&1
timeout 60 python3 scripts/bench_coarse_wgmma.py --shapes 49152x576 --bits 2,4 --ms 1,8,16 --no-previous \
  --paths "x prep plain launch,x prep pdl" --json "$OUT/head_xpdl_short.json" > "$OUT/head_xpdl_short.log" 2>&1
python3 scripts/compare_head_paths.py "$OUT/head_xpdl.log" "$OUT/head_xpdl_short.log" --base "x prep plain launch"
