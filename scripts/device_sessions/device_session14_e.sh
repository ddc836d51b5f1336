# Fourteenth session, call e: cuda tests of the coarse-wgmma pass, the draft head and the coarse
# head; fast-mode timing of both dispatches against cuBLAS (124160 x 5120) and on SmolLM2's real
# hidden states (agreement, recall@16); an M = 64 sweep of block / stages / chunks.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
set -o pipefail
timeout 200 python3 -m pytest -q -p no:cacheprovider -n 8 --timeout=180 -m cuda tests/ops/test_coarse_wgmma.py \
  tests/nn/test_draft_head.py tests/ops/test_coarse_head.py 2>&1 | tail -25 | tee $OUT/pytest_cuda.log
timeout 230 python3 scripts/bench_coarse_wgmma.py --ms 1,8,16,32,64 --real .realhead/smollm2_head.pt.xz \
  --json $OUT/wgmma.json 2>&1 | tee $OUT/wgmma.log | tail -45
timeout 80 python3 scripts/tune_coarse_wgmma.py --ms 64 --bits 2 --blocks 128,64 --stages 2,3 --pipe 0 --magic 0 \
  --chunks 1,2 --json $OUT/tune64.json 2>&1 | tee $OUT/tune64.log | tail -12
