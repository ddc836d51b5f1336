#!/usr/bin/env bash
# The GPU tier in one call: run on an H200 (or any CUDA machine) from the repository root.
#   OUT=results bash scripts/gpu_check.sh [--full] [--op NAME ...] [--skip-tests] [--skip-bench]
# 1. the cuda-marked tests (same tests as CI on CUDA tensors + compile / opcheck / CUDA graphs),
# 2. the SASS check of the FP8 GEMMs (scripts/check_sass.py),
# 3. the tiny DeepSeek-style model's self-test on CUDA (Triton vs reference, decode vs prefill),
# 4. the benchmark registry (`lowbit bench`, --quick unless --full), table + JSON + PNG; its
#    vocab-parallel head runs at world size 1, the real-head benchmark only where its data file is.
# Everything lands under $OUT in at most 6 files, so a remote runner can fetch them.
set -uo pipefail
OUT="${OUT:-gpu_results}"
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
QUICK="--quick"; OPS=(); RUN_TESTS=1; RUN_BENCH=1; PYTEST_ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --full) QUICK="" ;;
    --op) OPS+=(--op "$2"); shift ;;
    --skip-tests) RUN_TESTS=0 ;;
    --skip-bench) RUN_BENCH=0 ;;
    -k) PYTEST_ARGS+=(-k "$2"); shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
# Per-step wall-clock caps in seconds (a capped step counts as a failure; its output is kept).
T_TESTS="${T_TESTS:-1800}"; T_SELFTEST="${T_SELFTEST:-300}"; T_BENCH="${T_BENCH:-1800}"
status=0
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
} > "$OUT/pytest_cuda.log" 2>&1
# pytest-xdist spreads the cuda tier over PYTEST_WORKERS processes when it is installed.
XDIST=()
if python3 -c "import xdist" 2>/dev/null; then XDIST=(-n "${PYTEST_WORKERS:-8}"); fi
if [ "$RUN_TESTS" = 1 ]; then
  timeout "$T_TESTS" python3 -m pytest -m "cuda and not slow" -q -p no:cacheprovider --timeout=300 "${XDIST[@]}" "${PYTEST_ARGS[@]}" 2>&1 \
    | tee -a "$OUT/pytest_cuda.log" || status=1
  python3 scripts/check_sass.py 2>&1 | tee "$OUT/sass.txt" || status=1
fi
if [ "$RUN_TESTS" = 1 ]; then
  timeout "$T_SELFTEST" python3 -m lowbit.cli selftest --device cuda 2>&1 | tee "$OUT/selftest.log" || status=1
fi
if [ "$RUN_BENCH" = 1 ]; then
  timeout "$T_BENCH" python3 -m lowbit.cli bench $QUICK "${OPS[@]}" --out "$OUT" 2>&1 | tee "$OUT/bench.log" || status=1
fi
exit $status
