"""``lowbit info``: versions and paths, and ``--dispatch``'s tables (no GPU needed)."""
from __future__ import annotations

import pytest

from lowbit.cli import main


def test_info_prints_versions(capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "torch" in out and "backend" in out


def test_info_dispatch_tables(capsys):
    """The draft head's routes, their resolution for the given head and the GEMMs' routes; the
    resolved table is the one ``dispatch_table`` returns."""
    from lowbit.ops.coarse_head.dispatch import dispatch_table

    assert main(["info", "--dispatch", "124160x5120"]) == 0
    out = capsys.readouterr().out
    for word in ("wgmma_int8", "mma_f16", "coarse_fp32", "fused_argmax", "certified_tail", "124160 x 5120",
                 "fp8_gemm", "fp4_gemm", "wgmma_gemv"):
        assert word in out, word
    rows = dispatch_table(124160, 5120)
    assert {r["coarse pass"] for r in rows} >= {"wgmma_int8", "mma_f16", "coarse_fp32"}


@pytest.mark.parametrize("bad", ["12x5", "x576", "0x576", "abc"])
def test_info_dispatch_rejects_bad_shapes(bad, capsys):
    with pytest.raises(SystemExit) as e:
        main(["info", "--dispatch", bad])
    assert e.value.code == 2
    assert "--dispatch" in capsys.readouterr().err
