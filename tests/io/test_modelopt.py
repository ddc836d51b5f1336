"""ModelOpt NVFP4 names: read / write bit-exact, validation naming the tensor, quant config."""
from __future__ import annotations

import pytest
import torch

from lowbit.formats import NVFP4
from lowbit.io import check_quant_config, is_excluded, modelopt_quant_config, read_input_scale, read_nvfp4, write_nvfp4
from tests.io._util import assert_same_bytes

P = "model.layers.0.mlp.down_proj"


def _sd(n=6, k=64, scalar_shape=()):
    g = torch.Generator().manual_seed(0)
    return {
        f"{P}.weight": torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, generator=g),
        f"{P}.weight_scale": torch.randint(0, 0x7F, (n, k // 16), dtype=torch.uint8, generator=g).view(torch.float8_e4m3fn),
        f"{P}.weight_scale_2": torch.tensor(0.0123, dtype=torch.float32).reshape(scalar_shape),
        f"{P}.input_scale": torch.tensor(0.5, dtype=torch.float32).reshape(scalar_shape),
    }


@pytest.mark.parametrize("scalar_shape", [(), (1,)])
def test_roundtrip_bit_exact(scalar_shape):
    sd = _sd(scalar_shape=scalar_shape)
    fmt = read_nvfp4(sd, P)
    assert isinstance(fmt, NVFP4) and fmt.shape == (6, 64) and fmt.global_scale.dim() == 0
    assert fmt.packed.data_ptr() == sd[f"{P}.weight"].data_ptr()  # no copy
    out = write_nvfp4(fmt, P, input_scale=read_input_scale(sd, P), scalar_shape=scalar_shape)
    assert_same_bytes(out, sd)


def test_values_use_low_nibble_first_and_row_major_scales():
    sd = _sd(n=2, k=32)
    sd[f"{P}.weight"].zero_()
    sd[f"{P}.weight"][1, 0] = 0x31
    sd[f"{P}.weight_scale"] = torch.tensor([[1.0, 1.0], [2.0, 4.0]]).to(torch.float8_e4m3fn)
    sd[f"{P}.weight_scale_2"] = torch.tensor(0.5)
    w = read_nvfp4(sd, P).dequantize()
    assert w[1, :2].tolist() == [0.5 * 2.0 * 0.5, 1.5 * 2.0 * 0.5]
    sd[f"{P}.weight"][1, 8] = 0x01  # element 16 of row 1: the second scale (4.0)
    assert read_nvfp4(sd, P).dequantize()[1, 16].item() == 0.5 * 4.0 * 0.5


def test_quantized_weight_roundtrip():
    q = NVFP4.quantize(torch.randn(5, 48))
    back = read_nvfp4(write_nvfp4(q, "lm_head"), "lm_head")
    assert torch.equal(back.dequantize(), q.dequantize())
    assert set(write_nvfp4(q, "")) == {"weight", "weight_scale", "weight_scale_2"}
    assert read_input_scale(write_nvfp4(q, "x"), "x") is None


@pytest.mark.parametrize(
    "name,bad,match",
    [
        ("weight", None, "no tensor 'model.layers.0.mlp.down_proj.weight'"),
        ("weight_scale", None, "no tensor 'model.layers.0.mlp.down_proj.weight_scale'"),
        ("weight_scale_2", None, "weight_scale_2"),
        ("weight", torch.zeros(6, 32, dtype=torch.int8), "down_proj.weight' has dtype"),
        ("weight", torch.zeros(6, 32, 1, dtype=torch.uint8), "down_proj.weight' must have 2 dims"),
        ("weight", torch.zeros(6, 28, dtype=torch.uint8), "down_proj.weight_scale' has shape"),
        ("weight_scale", torch.zeros(6, 4), "weight_scale' has dtype"),
        ("weight_scale", torch.zeros(4, 6, dtype=torch.float8_e4m3fn), "weight_scale' has shape"),
        ("weight_scale_2", torch.zeros(2), "weight_scale_2' must be an fp32 scalar"),
        ("weight_scale_2", torch.zeros((), dtype=torch.float16), "weight_scale_2' has dtype"),
    ],
)
def test_bad_tensors_raise_naming_the_tensor(name, bad, match):
    sd = _sd()
    if bad is None:
        del sd[f"{P}.{name}"]
    else:
        sd[f"{P}.{name}"] = bad
    with pytest.raises(ValueError, match=match):
        read_nvfp4(sd, P)


def test_k_not_multiple_of_16_is_rejected():
    sd = _sd(n=2, k=32)
    sd[f"{P}.weight"] = torch.zeros(2, 12, dtype=torch.uint8)
    sd[f"{P}.weight_scale"] = torch.zeros(2, 1, dtype=torch.float8_e4m3fn)
    with pytest.raises(ValueError, match="multiple of 16"):
        read_nvfp4(sd, P)


def test_writer_rejects_bad_arguments():
    q = NVFP4.quantize(torch.randn(2, 32))
    with pytest.raises(ValueError, match="NVFP4"):
        write_nvfp4(torch.zeros(2, 2), P)
    with pytest.raises(ValueError, match="scalar_shape"):
        write_nvfp4(q, P, scalar_shape=(2,))
    with pytest.raises(ValueError, match="input_scale"):
        write_nvfp4(q, P, input_scale=torch.zeros(2))
    assert write_nvfp4(q, P, input_scale=0.25)[f"{P}.input_scale"].item() == 0.25


def test_quant_config():
    cfg = modelopt_quant_config(["lm_head", "*.mlp.gate"], producer_version="0.29.0")
    assert cfg == {"producer": {"name": "modelopt", "version": "0.29.0"},
                   "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": None, "group_size": 16,
                                    "exclude_modules": ["lm_head", "*.mlp.gate"]}}
    assert check_quant_config(cfg) is cfg
    # vLLM refuses an NVFP4 hf_quant_config.json without these three fields
    assert {"group_size", "kv_cache_quant_algo", "exclude_modules"} <= set(cfg["quantization"])
    with pytest.raises(ValueError, match="kv_cache_quant_algo' must be a string or null"):
        check_quant_config({"quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": 8}})
    assert is_excluded(cfg, "lm_head") and is_excluded(cfg, "model.layers.3.mlp.gate")
    assert not is_excluded(cfg, "model.layers.3.mlp.gate_proj")
    with pytest.raises(ValueError, match="group_size must be 16"):
        check_quant_config({"quantization": {"quant_algo": "NVFP4", "group_size": 32}})
    with pytest.raises(ValueError, match="quant_algo"):
        check_quant_config({"quantization": {}})
    with pytest.raises(ValueError, match="exclude_modules"):
        check_quant_config({"quantization": {"quant_algo": "NVFP4", "exclude_modules": "lm_head"}})
    with pytest.raises(ValueError, match="quant_algo"):
        modelopt_quant_config(quant_algo="FP8")


def test_hf_quantization_config_declares_weight_only():
    from lowbit.io.modelopt import modelopt_hf_quantization_config

    cfg = modelopt_hf_quantization_config(["lm_head"], producer_version="1.0")
    assert cfg["quant_method"] == "modelopt" and cfg["quant_algo"] == "NVFP4" and cfg["group_size"] == 16
    assert cfg["ignore"] == ["lm_head"] and cfg["producer"] == {"name": "lowbit", "version": "1.0"}
    groups = list(cfg["config_groups"].values())
    assert groups and all(g["input_activations"] is None for g in groups)  # W4A16: no activation scale needed
    assert groups[0]["weights"]["num_bits"] == 4 and groups[0]["weights"]["group_size"] == 16
