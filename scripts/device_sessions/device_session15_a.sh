# Fifteenth session, call a: what the fourteenth session left unrun on the H200 -- the draft-head /
# coarse-head / coarse-wgmma cuda tests on its final tree, the shared _gluon_wgmma helpers in the
# FP4 GEMV (its cuda tests and the fp4 / fp8 / linear tests), the maxnreg 128 sweep at NB 32 / 64.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
set -o pipefail
timeout 200 python3 -m pytest -q -p no:cacheprovider -n 8 --timeout=180 -m cuda tests/ops/test_coarse_wgmma.py \
  tests/nn/test_draft_head.py tests/ops/test_coarse_head.py 2>&1 | tail -15 | tee $OUT/pytest_cuda_head.log
timeout 150 python3 -m pytest -q -p no:cacheprovider -n 8 --timeout=140 -m cuda tests/ops/test_fp4_wgmma_gemv.py \
  tests/ops/test_fp4_gemm.py tests/ops/test_fp8_gemm.py tests/nn/test_linear.py 2>&1 | tail -15 | tee $OUT/pytest_cuda_gemm.log
timeout 120 python3 scripts/tune_coarse_wgmma.py --ms 32,64 --bits 2,4 --blocks 128 --stages 2,3 --pipe 0 --magic 0 \
  --chunks 1 --maxnreg 0,128 --json $OUT/tune_reg.json 2>&1 | tee $OUT/tune_reg.log | tail -20
