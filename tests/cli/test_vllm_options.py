"""The CLI's vLLM-facing options: ``demo --engine vllm`` and ``convert --layout`` with its vLLM line."""
from __future__ import annotations

import importlib.util
import json

import pytest

from lowbit.cli import main
from tests.cli._tiny import make_checkpoint

LAYERS = {"model.layers.0.self_attn.q_proj.weight": (64, 64), "lm_head.weight": (96, 64)}


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_demo_engine_vllm_without_vllm_is_one_line_error(capsys):
    assert main(["demo", "--engine", "vllm", "--max-new-tokens", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("lowbit: error:") and "vLLM" in err[0]


def test_demo_engine_is_checked(capsys):
    with pytest.raises(SystemExit) as e:
        main(["demo", "--engine", "sglang"])
    assert e.value.code == 2


@pytest.mark.parametrize("layout, where", [(None, "cannot load"), ("compressed-tensors", "loads this checkpoint")])
def test_convert_int4_says_where_vllm_loads_it(tmp_path, capsys, layout, where):
    src = tmp_path / "src"
    make_checkpoint(str(src / "model.safetensors"), LAYERS)
    (src / "config.json").write_text(json.dumps({"model_type": "llama"}))
    out = tmp_path / "out"
    args = ["convert", str(src), "--format", "int4", "--out", str(out)] + (["--layout", layout] if layout else [])
    assert main(args) == 0
    vllm_lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("vLLM:")]
    assert len(vllm_lines) == 1 and where in vllm_lines[0]
    qc = json.loads((out / "config.json").read_text()).get("quantization_config")
    assert (qc is not None and qc.get("quant_method") == "compressed-tensors") == (layout is not None)


def test_convert_layout_must_fit_the_format(tmp_path, capsys):
    src = tmp_path / "src"
    make_checkpoint(str(src / "model.safetensors"), LAYERS)
    assert main(["convert", str(src), "--format", "nvfp4", "--layout", "compressed-tensors", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("lowbit: error:") and "layout" in err[0]
    assert main(["convert", str(src), "--mp", "2", "--layout", "compressed-tensors", "--out", str(tmp_path / "p")]) == 2
