#!/usr/bin/env bash
# Session 21, call a: (#9) what a pure streaming read of a decode GEMM's bytes costs in the layer-stack
# timer (scripts/probe_read_floor.py), next to fp8_gemm / fp4_gemm at M = 1, 16, 64 in the same timer;
# (#8) the twentieth session's final gathered dispatch (use_lean): its cuda tests and the registered
# benchmark. Results under $OUT.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT" "$OUT/bench"
timeout 150 python3 scripts/probe_read_floor.py --json "$OUT/read_floor.json" > "$OUT/read_floor.log" 2>&1; cat "$OUT/read_floor.log"
timeout 150 python3 scripts/bench_gemm_stack.py --ms 1,16,64 --ops fp8,fp4 --json "$OUT/gemm_stack.json" > "$OUT/gemm_stack.log" 2>&1
python3 - "$OUT/gemm_stack.log" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    try: r = json.loads(line)
    except ValueError: print(line.rstrip()); continue
    if "op" in r: print(r["op"], r["M"], r["N"], r["K"], "floor", r["floor_us"], "lowbit", r["lowbit_stack_us"], "x", r["x_floor_stack"], "rowwise", r["rowwise_stack_us"], "tensor", r["tensor_stack_us"])
PY
timeout 90 python3 -m pytest tests/ops/test_gathered.py tests/ops/test_gathered_mma.py tests/nn/test_markov.py \
  -m cuda -q -p no:cacheprovider -n 4 > "$OUT/pytest_gathered.log" 2>&1; tail -2 "$OUT/pytest_gathered.log"
timeout 150 python3 -m lowbit.cli bench --op gathered_bias --out "$OUT/bench" > "$OUT/bench.log" 2>&1; tail -45 "$OUT/bench.log"
