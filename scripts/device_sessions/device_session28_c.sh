#!/usr/bin/env bash
# Twenty-eighth session, call c: the warp-specialized kernels at 56 registers (three CTAs an SM) at
# NB = 8 / 16 (INT2 whole-row) and NB = 16 (INT4 per group) as the default -- fast argmax end to
# end against the previous caps ("two CTAs an SM") on 124160 x 5120 and SmolLM2's 49152 x 576, the
# deeper rings / 40 registers at three-four CTAs an SM, and the coarse / draft-head cuda tests.
# (As run, the pytest line named tests/test_draft_head.py, which does not exist: "no tests ran";
# fixed here. The whole cuda tier ran in call d.)
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 170 python3 scripts/bench_coarse_wgmma.py --bits 2,4 --ms 1,4,8,16,32 --no-previous \
  --paths "default,two CTAs an SM" --json "$OUT/head_regs.json" > "$OUT/head_regs.log" 2>&1
cut -c1-300 "$OUT/head_regs.log" | grep -v '"agree' ; grep -c "" "$OUT/head_regs.log"
timeout 60 python3 scripts/bench_coarse_wgmma.py --shapes 49152x576 --bits 2,4 --ms 1,8,16 --no-previous \
  --paths "default,two CTAs an SM" --json "$OUT/head_small_regs.json" > "$OUT/head_small_regs.log" 2>&1
cut -c1-200 "$OUT/head_small_regs.log"
timeout 80 python3 scripts/tune_coarse_span.py --variants ring3 --ms 1,16 --bits 2,4 \
  --json "$OUT/tune_ring3.json" > "$OUT/tune_ring3.log" 2>&1
cut -c1-200 "$OUT/tune_ring3.log"
timeout 230 python3 -m pytest tests/ops/test_coarse_wgmma.py tests/ops/test_coarse_head.py tests/nn/test_draft_head.py \
  -m cuda -q -p no:cacheprovider -n 12 --tb=short > "$OUT/pytest_head.log" 2>&1; tail -3 "$OUT/pytest_head.log"
grep -E "^(FAILED|ERROR)" "$OUT/pytest_head.log" | head -20
