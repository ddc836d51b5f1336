"""lowbit convert: the CLI and lowbit.io.convert on tiny random checkpoints."""
from __future__ import annotations

import json
import os

import pytest
import torch
from safetensors.torch import load_file

from lowbit.cli import main
from lowbit.formats import FP8, MXFP4, NVFP4, INTx
from tests._helpers import rel_err
from tests.cli._tiny import make_checkpoint

LAYERS = {
    "model.embed_tokens.weight": (96, 64),
    "model.layers.0.input_layernorm.weight": (64,),
    "model.layers.0.self_attn.q_proj.weight": (64, 64),
    "model.layers.0.mlp.down_proj.weight": (64, 128),
    "model.layers.0.mlp.gate.weight": (4, 64),  # a router: too few rows, kept
    "model.norm.weight": (64,),
    "lm_head.weight": (96, 64),
}
QUANTIZED = ["model.layers.0.self_attn.q_proj", "model.layers.0.mlp.down_proj", "lm_head"]


@pytest.fixture
def ckpt(tmp_path):
    src = tmp_path / "src"
    tensors = make_checkpoint(str(src / "model.safetensors"), LAYERS)
    (src / "config.json").write_text(json.dumps({"model_type": "llama"}))
    return src, tensors


def _dequant(out: dict, prefix: str, fmt: str) -> torch.Tensor:
    if fmt == "nvfp4":
        return NVFP4(out[f"{prefix}.weight"], out[f"{prefix}.weight_scale"], out[f"{prefix}.weight_scale_2"].reshape(())).dequantize()
    if fmt == "mxfp4":
        return MXFP4(out[f"{prefix}.weight"].view(torch.uint8), out[f"{prefix}.scale"].view(torch.uint8)).dequantize()
    if fmt == "fp8-block":
        return FP8(out[f"{prefix}.weight"], out[f"{prefix}.weight_scale_inv"], "block", 128).dequantize()
    n, k = out[f"{prefix}.weight_shape"].tolist()
    return INTx(out[f"{prefix}.weight_packed"], out[f"{prefix}.weight_scale"], out[f"{prefix}.weight_zero"],
                int(fmt[3:]), 32, k).dequantize()


# error bounds per format on N(0, 0.05) weights: FP4 ~ 0.1, FP8 ~ 0.03, INT4 g32 ~ 0.1, INT2 ~ 0.5
TOL = {"nvfp4": 0.15, "mxfp4": 0.2, "fp8-block": 0.05, "int4": 0.15, "int2": 0.6}


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4", "fp8-block", "int4", "int2"])
def test_convert_each_format(ckpt, tmp_path, fmt, capsys):
    src, tensors = ckpt
    out = tmp_path / f"out-{fmt}"
    rc = main(["convert", str(src), "--format", fmt, "--out", str(out), "--group-size", "32"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "3 tensors quantized" in text and "relative error" in text
    got = load_file(str(out / "model.safetensors"))
    for name in ("model.embed_tokens.weight", "model.layers.0.input_layernorm.weight", "model.norm.weight",
                 "model.layers.0.mlp.gate.weight"):
        assert torch.equal(got[name], tensors[name]), name  # kept bit-exact
    for prefix in QUANTIZED:
        w = tensors[f"{prefix}.weight"]
        deq = _dequant(got, prefix, fmt)
        assert deq.shape == w.shape
        assert rel_err(deq, w.float()) < TOL[fmt], prefix
        if fmt.startswith("int"):
            assert f"{prefix}.weight" not in got
    cfg = json.loads((out / "lowbit_quant_config.json").read_text())
    assert cfg["format"] == fmt and sorted(cfg["quantized_modules"]) == sorted(QUANTIZED)
    assert (out / "config.json").exists()
    if fmt == "nvfp4":
        hq = json.loads((out / "hf_quant_config.json").read_text())
        assert hq["quantization"]["quant_algo"] == "NVFP4"
        assert "model.layers.0.mlp.gate" in hq["quantization"]["exclude_modules"]
    if fmt == "fp8-block":
        assert json.loads((out / "config.json").read_text())["quantization_config"]["weight_block_size"] == [128, 128]
    assert not [f for f in os.listdir(tmp_path) if ".tmp-" in f]


def test_convert_reads_back_with_lowbit_io(ckpt, tmp_path):
    from lowbit.io import load_checkpoint, read_nvfp4

    src, tensors = ckpt
    out = tmp_path / "nv"
    assert main(["convert", str(src / "model.safetensors"), "--format", "nvfp4", "--out", str(out)]) == 0
    ck = load_checkpoint(str(out))
    assert ck.quant_config is not None
    w = read_nvfp4(ck.tensors, "lm_head").dequantize()
    assert rel_err(w, tensors["lm_head.weight"].float()) < TOL["nvfp4"]


def test_convert_exclude_and_sharded_dir(tmp_path):
    src = tmp_path / "src"
    a = make_checkpoint(str(src / "model-00001-of-00002.safetensors"), {"a.q_proj.weight": (32, 64)}, seed=1)
    b = make_checkpoint(str(src / "model-00002-of-00002.safetensors"), {"b.k_proj.weight": (32, 64), "lm_head.weight": (64, 64)}, seed=2)
    (src / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {}}))
    out = tmp_path / "out"
    assert main(["convert", str(src), "--format", "int4", "--out", str(out), "--exclude", "lm_head"]) == 0
    s1 = load_file(str(out / "model-00001-of-00002.safetensors"))
    s2 = load_file(str(out / "model-00002-of-00002.safetensors"))
    assert "a.q_proj.weight_packed" in s1 and "b.k_proj.weight_packed" in s2
    assert torch.equal(s2["lm_head.weight"], b["lm_head.weight"])
    index = json.loads((out / "model.safetensors.index.json").read_text())["weight_map"]
    assert index["a.q_proj.weight_scale"] == "model-00001-of-00002.safetensors"
    assert index["lm_head.weight"] == "model-00002-of-00002.safetensors"
    del a


def test_convert_shape_misfit_is_a_clear_error_and_writes_nothing(tmp_path, capsys):
    src = tmp_path / "m.safetensors"
    make_checkpoint(str(src), {"x.up_proj.weight": (32, 48)})  # K = 48: not a multiple of 32
    out = tmp_path / "out"
    rc = main(["convert", str(src), "--format", "mxfp4", "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith("lowbit: error:") and "x.up_proj.weight [32, 48]" in err and "multiple of 32" in err
    assert "Traceback" not in err
    assert not out.exists() and os.listdir(tmp_path) == ["m.safetensors"]
    # fp8-block takes any shape
    assert main(["convert", str(src), "--format", "fp8-block", "--out", str(out)]) == 0


def test_convert_failure_midway_leaves_nothing(ckpt, tmp_path, monkeypatch):
    import lowbit.io.convert as conv

    src, _ = ckpt
    calls = {"n": 0}
    real = conv.quantize_tensor

    def flaky(*a, **k):
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError("disk full")
        return real(*a, **k)

    monkeypatch.setattr(conv, "quantize_tensor", flaky)
    with pytest.raises(OSError):
        conv.convert(str(src), str(tmp_path / "out"), "nvfp4")
    assert sorted(os.listdir(tmp_path)) == ["src"]


def test_convert_bad_arguments(ckpt, tmp_path, capsys):
    src, _ = ckpt
    assert main(["convert", str(tmp_path / "missing.safetensors"), "--format", "int4", "--out", str(tmp_path / "o")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "exists").mkdir()
    assert main(["convert", str(src), "--format", "int4", "--out", str(tmp_path / "exists")]) == 2
    assert "already exists" in capsys.readouterr().err
    assert main(["convert", str(src), "--format", "int4", "--out", str(tmp_path / "o"), "--group-size", "24"]) == 2
    assert "multiple of 16" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["convert", str(src), "--format", "int3", "--out", str(tmp_path / "o")])
    assert e.value.code == 2
    assert "invalid choice" in capsys.readouterr().err
    assert main(["convert", str(src), "--format", "int4", "--out", str(tmp_path / "exists"), "--overwrite"]) == 0
    assert (tmp_path / "exists" / "model.safetensors").exists()
