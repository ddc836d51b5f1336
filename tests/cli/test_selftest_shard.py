"""`lowbit selftest` and `lowbit convert --mp N` (the tiny model's TP sharding) from the command line."""
from __future__ import annotations

import os

import pytest
import torch

from lowbit.cli import main
from lowbit.models.tiny import TinyConfig, TinyModel, load_hf, load_model, save_hf


def _tiny_checkpoint(tmp_path):
    cfg = TinyConfig(n_layers=1)
    model = TinyModel(cfg, seed=3)
    src = tmp_path / "hf"
    save_hf(model, str(src))
    return model, src


def test_selftest_cpu_passes(capsys):
    assert main(["selftest", "--device", "cpu", "--steps", "3"]) == 0
    assert "OK" in capsys.readouterr().out


def test_selftest_bad_steps(capsys):
    assert main(["selftest", "--device", "cpu", "--steps", "0"]) == 2
    assert "--steps" in capsys.readouterr().err


def test_convert_mp_round_trips_logits(tmp_path):
    model, src = _tiny_checkpoint(tmp_path)
    out = tmp_path / "shards"
    assert main(["convert", str(src), "--mp", "2", "--out", str(out)]) == 0
    assert {"model0-mp2.safetensors", "model1-mp2.safetensors"} <= set(os.listdir(out))
    merged = load_model(str(out), 2)
    tokens = torch.randint(0, model.cfg.vocab_size, (1, 12), generator=torch.Generator().manual_seed(0))
    # the unsharded reference is the HF checkpoint itself (save_hf stores routed experts in bf16)
    with torch.no_grad():
        torch.testing.assert_close(merged(tokens), load_hf(str(src))(tokens), rtol=0, atol=0)


@pytest.mark.parametrize("argv, message", [
    (["--mp", "2", "--format", "nvfp4"], "--experts-dtype, not --format"),
    (["--mp", "0"], "--mp must be >= 1"),
    ([], "--format is required"),
    (["--format", "nvfp4", "--experts-dtype", "fp4"], "--experts-dtype goes with --mp"),
])
def test_convert_mp_bad_arguments(tmp_path, capsys, argv, message):
    _, src = _tiny_checkpoint(tmp_path)
    assert main(["convert", str(src), "--out", str(tmp_path / "o"), *argv]) == 2
    assert message in capsys.readouterr().err


def test_convert_mp_is_built_aside_and_honours_the_umask(tmp_path, monkeypatch):
    import stat

    import lowbit.models.tiny as tiny

    _, src = _tiny_checkpoint(tmp_path)
    out = tmp_path / "shards"
    old = os.umask(0o027)
    try:
        assert main(["convert", str(src), "--mp", "2", "--out", str(out)]) == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o750
    assert {stat.S_IMODE(os.stat(out / f).st_mode) for f in os.listdir(out)} == {0o640}
    assert sorted(os.listdir(tmp_path)) == ["hf", "shards"]
    # a failure after the first shard is written leaves no temporary folder and the old output as it was
    real = tiny.convert_hf_to_shards

    def fail_midway(src_, dst, mp, experts_dtype=None):
        real(src_, dst, mp, experts_dtype=experts_dtype)
        raise OSError(28, "No space left on device", os.path.join(dst, "model1-mp2.safetensors"))

    monkeypatch.setattr(tiny, "convert_hf_to_shards", fail_midway)
    before = sorted(os.listdir(out))
    assert main(["convert", str(src), "--mp", "2", "--out", str(out), "--overwrite"]) == 2
    assert sorted(os.listdir(tmp_path)) == ["hf", "shards"] and sorted(os.listdir(out)) == before
    assert main(["convert", str(src), "--mp", "2", "--out", str(tmp_path / "fresh")]) == 2
    assert sorted(os.listdir(tmp_path)) == ["hf", "shards"]  # no partial shards under the new name
