# Shared by the prepared device scripts (scripts/device_next_*.sh; `source scripts/device_lib.sh`
# from the repository root): the environment of a device call and its two recurring steps. Logs and
# JSON go under $OUT (the device tool's output folder; gpu_results when run by hand).
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"

# cuda_tests LOG TIMEOUT PYTEST_ARGS...: the cuda tier of the named tests (14 workers) into $OUT/LOG,
# then its summary, the failures and the first failure's traceback
cuda_tests() {
  local log="$OUT/$1" limit=$2; shift 2
  timeout "$limit" python3 -m pytest -m cuda -q -p no:cacheprovider -n 14 --tb=short "$@" > "$log" 2>&1
  echo "rc=$?"
  tail -3 "$log"; grep -E "^(FAILED|ERROR)" "$log" | head -20
  grep -m1 -B2 -A30 "^____" "$log" | head -50
}

# head_paths NAME TIMEOUT BENCH_ARGS...: scripts/bench_coarse_wgmma.py over three alternating rounds
# (the wgmma paths only) into $OUT/NAME.log / .json, then the paths compared against the default
head_paths() {
  local name=$1 limit=$2; shift 2
  timeout "$limit" python3 scripts/bench_coarse_wgmma.py --no-previous --rounds 3 "$@" --json "$OUT/$name.json" \
    > "$OUT/$name.log" 2>&1
  echo "bench rc=$?"; python3 scripts/compare_head_paths.py "$OUT/$name.log"
}
