"""Files (safetensors + hf_quant_config.json, atomic), detect_format, whole-layer round trips."""
from __future__ import annotations

import json
import os

import pytest
import torch

from lowbit.formats import FP8, MXFP4, NVFP4
from lowbit.io import (
    DENSE, FP8_BLOCK_DEEPSEEK, FP8_ROW_CT, MXFP4_DEEPSEEK, NVFP4_CT, NVFP4_MODELOPT, QUANT_CONFIG_NAME,
    detect_format, load_checkpoint, modelopt_quant_config, read_layer, save_checkpoint, write_fp4_experts,
    write_fp8_block, write_fp8_channel, write_layer, write_nvfp4, write_nvfp4_ct,
)
from tests.io._util import assert_same_bytes


def _mixed_state_dict():
    sd = {}
    sd.update(write_nvfp4(NVFP4.quantize(torch.randn(8, 64)), "a", input_scale=0.5))
    sd.update(write_nvfp4_ct(NVFP4.quantize(torch.randn(8, 32)), "b", input_global_scale=100.0))
    sd.update(write_fp8_channel(FP8.quantize(torch.randn(4, 48), "row"), "c"))
    sd.update(write_fp8_block(FP8.quantize(torch.randn(130, 140), "block", scale_fmt="ue8m0"), "d", scale_name="scale", scale_dtype=torch.float8_e8m0fnu))
    sd.update(write_fp4_experts(MXFP4.quantize(torch.randn(4, 64)), "e", weight_dtype=torch.float4_e2m1fn_x2))
    sd["f.weight"] = torch.randn(3, 5, dtype=torch.bfloat16)
    return sd


VARIANT_OF = {"a": NVFP4_MODELOPT, "b": NVFP4_CT, "c": FP8_ROW_CT, "d": FP8_BLOCK_DEEPSEEK, "e": MXFP4_DEEPSEEK, "f": DENSE}


def test_detect_format_each_variant():
    sd = _mixed_state_dict()
    assert {p: detect_format(sd, p) for p in VARIANT_OF} == VARIANT_OF


def test_detect_format_rejects_unknown():
    with pytest.raises(ValueError, match="neither 'x.weight'"):
        detect_format({}, "x")
    with pytest.raises(ValueError, match="no scale"):
        detect_format({"x.weight": torch.zeros(2, 2, dtype=torch.float8_e4m3fn)}, "x")
    with pytest.raises(ValueError, match="matches no checkpoint layout lowbit reads"):
        detect_format({"x.weight": torch.zeros(2, 2, dtype=torch.int32)}, "x")
    with pytest.raises(ValueError, match="pack-quantized"):
        detect_format({"x.weight_packed": torch.zeros(2, 2, dtype=torch.int32)}, "x")


def test_save_load_every_variant_bit_exact(tmp_path):
    sd = _mixed_state_dict()
    cfg = modelopt_quant_config(exclude_modules=["f"])
    path = tmp_path / "model.safetensors"
    save_checkpoint(path, sd, cfg)
    assert sorted(os.listdir(tmp_path)) == [QUANT_CONFIG_NAME, "model.safetensors"]  # no temporaries left
    loaded, qcfg = load_checkpoint(path)
    assert qcfg == cfg and json.loads((tmp_path / QUANT_CONFIG_NAME).read_text()) == cfg
    assert_same_bytes(loaded, sd)
    rewritten = {}
    for prefix, variant in VARIANT_OF.items():
        layer = read_layer(loaded, prefix)
        assert layer.variant == variant
        rewritten.update(write_layer(layer, prefix))
    assert_same_bytes(rewritten, sd)


def test_load_directory_of_shards_and_duplicates(tmp_path):
    sd = _mixed_state_dict()
    names = sorted(sd)
    save_checkpoint(tmp_path / "model-00001-of-00002.safetensors", {k: sd[k] for k in names[:5]})
    save_checkpoint(tmp_path / "model-00002-of-00002.safetensors", {k: sd[k] for k in names[5:]})
    ck = load_checkpoint(tmp_path)
    assert ck.quant_config is None
    assert_same_bytes(ck.tensors, sd)
    save_checkpoint(tmp_path / "dup.safetensors", {names[0]: sd[names[0]]})
    with pytest.raises(ValueError, match="more than one file"):
        load_checkpoint(tmp_path)


def test_failed_save_leaves_previous_file_intact(tmp_path):
    path = tmp_path / "m.safetensors"
    save_checkpoint(path, {"w": torch.ones(2)})
    before = path.read_bytes()
    shared = torch.zeros(4)
    with pytest.raises(Exception):
        save_checkpoint(path, {"x": shared, "y": shared[:2]})  # safetensors refuses shared storage
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["m.safetensors"]


def test_save_and_load_reject_bad_input(tmp_path):
    with pytest.raises(ValueError, match="non-empty"):
        save_checkpoint(tmp_path / "a.safetensors", {})
    with pytest.raises(ValueError, match="not a tensor"):
        save_checkpoint(tmp_path / "a.safetensors", {"w": [1.0]})
    with pytest.raises(ValueError, match="group_size"):
        save_checkpoint(tmp_path / "a.safetensors", {"w": torch.ones(1)}, {"quantization": {"quant_algo": "NVFP4", "group_size": 32}})
    with pytest.raises(ValueError, match="does not exist"):
        save_checkpoint(tmp_path / "nope" / "a.safetensors", {"w": torch.ones(1)})
    with pytest.raises(ValueError, match="does not exist"):
        load_checkpoint(tmp_path / "missing.safetensors")
    with pytest.raises(ValueError, match="no .safetensors"):
        load_checkpoint(tmp_path)
    save_checkpoint(tmp_path / "a.safetensors", {"w": torch.ones(1)})
    (tmp_path / QUANT_CONFIG_NAME).write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_checkpoint(tmp_path / "a.safetensors")


def test_write_layer_rejects():
    with pytest.raises(ValueError, match="Layer"):
        write_layer({"fmt": None}, "x")
