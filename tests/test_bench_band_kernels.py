"""``scripts/bench_band_kernels.py`` (the certified band kernels' A/B on the H200) runs its whole
logic under the Triton interpreter: a tiny head on CPU tensors, a stand-in timer. So the script a
device session spends minutes on does not find a renamed switch or API there, and the variants
it compares give the logits it claims (the epilogue's schedule switch: bit for bit)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

import lowbit
from lowbit._backend import interpret_mode

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(not interpret_mode(), reason="the interpreter tier runs the script's logic on CPU tensors; "
                    "on the H200 the script itself is the benchmark (scripts/device_next_band.sh)")
def test_bench_band_kernels_runs(monkeypatch, tmp_path, capsys):
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import bench_band_kernels as bench
    finally:
        sys.path.pop(0)
    import lowbit.bench.timing as timing
    from lowbit.ops.coarse_head import triton as tr

    calls = []

    def fake_time_us(fn, graph=False, rep=100):
        fn()
        calls.append(graph)
        return 1.0 + len(calls)

    def tiny_head(n, k, seed=0):
        g = torch.Generator().manual_seed(seed)
        return (torch.randn(n, k, generator=g) * 0.02).to(torch.bfloat16)

    monkeypatch.setattr(bench, "HEADS", ((300, 64),))
    monkeypatch.setattr(bench, "random_head", tiny_head)
    monkeypatch.setattr(timing, "time_us", fake_time_us)
    # the head's warm-up (every method at every k, for the compile) is interpreter time for nothing here
    monkeypatch.setattr(lowbit.DraftHead, "warmup", lambda self, max_m: None)
    shipped = (tr.EPILOGUE_STAGES, tr.NVFP4_DOT_BK)
    out = tmp_path / "band.json"
    monkeypatch.setattr(sys, "argv", ["bench_band_kernels.py", "--ms", "16", "--rounds", "1", "--json", str(out)])
    with lowbit.backend("triton"):
        assert bench.main() == 0
    assert (tr.EPILOGUE_STAGES, tr.NVFP4_DOT_BK) == shipped  # every switch restored
    rows = json.loads(out.read_text())
    assert not [r for r in rows if "error" in r]
    seen = {(r["coarse"], r["variant"]) for r in rows}
    expected = {(c, v) for c, (kind, _) in bench.COARSE.items() for v in bench.variants_for(kind)}
    expected |= {("DraftHead certified int8 topk16", v) for v in ("shipped", "pipelined epilogue")}
    assert seen == expected
    for r in rows:
        if r["variant"] == "pipelined epilogue" and "bit_identical" in r:
            assert r["bit_identical"], r  # the same arithmetic in the same order
        if r["variant"] == "nvfp4 bk64":
            assert r["rel_diff"] < 1e-5, r  # other summation steps, the same logits to fp32 rounding
    assert all(calls)  # every timing by CUDA-graph replay
    printed = capsys.readouterr().out.splitlines()
    assert sum(line.startswith("{") for line in printed) == len(rows)  # one JSON line a record
    table = printed[-(len(bench.COARSE) + 2):]  # the summary: a header, a line a configuration
    assert table[0].startswith("head") and all("300 x 64" in line for line in table[1:]), printed[-8:]
