"""evaluate_head's certified statistics per top-k pass (``fallback_rate@k`` and friends)."""
from __future__ import annotations

import math

import torch

from lowbit.models import eval_head


def _case():
    g = torch.Generator().manual_seed(5)
    return torch.randn(48, 32, generator=g), torch.randn(128, 32, generator=g)


def test_block_field_round_trips():
    cfg = eval_head.parse_config("certified:int8:g32:k2:r64:b16")
    assert cfg == {"mode": "certified", "bits": 8, "group_size": 32, "kcand": 2, "rerank": 64, "block": 16}
    assert eval_head.config_label(cfg) == "certified:int8:g32:k2:r64:b16"


def test_fallbacks_per_k_follow_the_candidates_a_block_emits():
    """One candidate per block of 16 cannot certify a top-16 set (at most 8 blocks emit 8
    candidates): every row falls back at k = 16. With every token of a block emitted, no block
    hides a member: no fallback at any k."""
    hidden, weight = _case()
    rows = eval_head.evaluate_head(hidden, weight, ["certified:int2:g32:k1:r256:b16", "certified:int2:g32:k16:r256:b16",
                                                    "fast:int4:g32:k8:r32"], ks=(1, 4, 16), batch=16)
    starved, full, fast = rows
    assert starved["fallback_rate@16"] == 1.0
    assert starved["fallback_rate@4"] > 0.0
    assert all(full[f"fallback_rate@{k}"] == 0.0 for k in (4, 16)) and full["fallback_rate"] == 0.0
    # the certified set holds at least k tokens; exact answers either way
    assert full["mean_set_size@16"] >= 16 and full["max_set_size@16"] >= full["mean_set_size@16"]
    assert full["recall@16"] == 1.0 and starved["recall@16"] == 1.0
    assert all(full[f"rescan_rate@{k}"] == 0.0 for k in (4, 16)) and full["rescan_rate"] == 0.0
    assert 0.0 <= starved["rescan_rate@4"] <= 1.0 - starved["fallback_rate@4"]
    assert not any("@" in key and key.startswith(("fallback", "mean_set", "max_set", "rescan")) for key in fast)
    assert math.isnan(fast["mean_set_size"])
