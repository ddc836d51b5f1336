"""lowbit.bench.one_pass.split_rows: the "one pass" baseline kernel copies every column block."""
from __future__ import annotations

import pytest
import torch

from lowbit.bench.one_pass import split_rows


@pytest.mark.parametrize("tier", [pytest.param("interpret", marks=pytest.mark.interpret),
                                  pytest.param("cuda", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("rows", [1, 63, 130])
def test_split_rows_copies_column_blocks(tier, rows, poison_empty):
    device = "cuda" if tier == "cuda" else "cpu"
    x = torch.randn(rows, 24, device=device)
    pre, post, comb = split_rows(x, (4, 4, 16))
    assert torch.equal(pre, x[:, :4]) and torch.equal(post, x[:, 4:8]) and torch.equal(comb, x[:, 8:])


def test_split_rows_rejects_wrong_widths():
    with pytest.raises(ValueError, match=r"\[R, 25\]"):
        split_rows(torch.zeros(4, 24), (4, 5, 16))
