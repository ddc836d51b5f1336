#!/usr/bin/env bash
# A/B of the eighth session's switched-off forms (see NOTES "Last changes not yet run on the
# H200"): the cuda tests of the draft head with them on, then the certified stages on the real
# head with each switch off / on (needs .realhead/ from scripts/real_head_data.py, carried).
# Results under $OUT.
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
timeout 200 python3 -m pytest -m "cuda and not slow" -q -p no:cacheprovider --timeout=300 -n 8 \
  tests/ops/test_coarse_head.py tests/nn/test_draft_head.py > "$OUT/pytest_cuda_head.log" 2>&1
tail -3 "$OUT/pytest_cuda_head.log"
DATA=.realhead/smollm2_head.pt.xz
for sw in "" "--set certified.FULL_DOT=1" "--set triton_mma.FUSED_ALPHA=1"; do
  tag=$(echo "${sw:-default}" | tr -c 'A-Za-z0-9_\n' '_')
  timeout 120 python3 scripts/profile_certified_stages.py "$DATA" --ms 1,4,16,64 $sw \
    --json "$OUT/stages_$tag.json" > "$OUT/stages_$tag.log" 2>&1
  grep -E "argmax \(head\)|topk16|tensor cores|fast" "$OUT/stages_$tag.log"
done
