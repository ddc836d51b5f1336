#!/usr/bin/env bash
# Prepared in session 21 for the next device call (not yet run): the two leads found offline after the
# last device call of session 21 --
#  * ptxas -O1 keeps every load ahead of the MMAs (at -O3 ptxas sinks them): the gathered kernel
#    (#8, --variants o1 against the shipped PDL + trigger dispatch, all 36 shapes) and mma_gemv
#    (#9, fp8_gemm at M <= 8: --variants o1,pdl,o1pdl in the layer stack);
#  * the bare read of the weights as a PDL launch with the early trigger (#9: is 1.3x the byte
#    floor reachable on the small shapes at all?);
# and the cuda tests of the new switches. Results under $OUT.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT" "$OUT/ab"
timeout 120 python3 -m pytest tests/ops/test_gathered_mma.py tests/ops/test_mma_gemv.py -m cuda -q -p no:cacheprovider \
  -n 4 --tb=short > "$OUT/pytest.log" 2>&1; tail -3 "$OUT/pytest.log"
OUT="$OUT/ab" timeout 150 python3 scripts/bench_gathered_mma.py --picked --variants o1 --rep 25 > "$OUT/ab.log" 2>&1; cat "$OUT/ab.log"
timeout 150 python3 scripts/bench_gemm_stack.py --ops fp8 --ms 1,8 --variants default,o1,pdl,o1pdl \
  --json "$OUT/gemm_stack.json" > "$OUT/gemm_stack.log" 2>&1; cat "$OUT/gemm_stack.log"
timeout 150 python3 scripts/probe_read_floor.py --pdl --json "$OUT/read_floor.json" > "$OUT/read_floor.log" 2>&1; cat "$OUT/read_floor.log"
