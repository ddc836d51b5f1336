"""torchao's safetensors layout, read by ``lowbit.io`` without torchao installed.

torchao flattens a quantized weight ``<p>.weight`` into ``<p>._weight_<attr>`` tensors plus a
header entry ``metadata["<p>.weight"] = {"_type", "_data", "_tensor_data_names"}`` and
``metadata["tensor_names"]``. The files here are made by hand with those keys (the real
torchao-written ones are checked in tests/vllm/test_torchao_written.py); the expected weights
come from element-by-element definitions written here: ``f32(q) * scale`` per block, E2M1 codes
from their table, the cuBLAS 128x4 scale swizzle by its index formula.
"""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from lowbit.formats import FP8, INTx, MXFP4, NVFP4
from lowbit.io import QUANT_CONFIG_NAME, load_checkpoint, modelopt_quant_config, read_torchao, torchao_config, torchao_layers

P = "model.layers.0.mlp.down_proj"
E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def _dt(name: str) -> dict:
    return {"_type": "torch.dtype", "_data": name}


def _entry(kind: str, data: dict, names: list) -> str:
    return json.dumps({"_type": kind, "_data": data, "_tensor_data_names": names})


def _file(tmp_path, kind: str, data: dict, attrs: dict, names: list | None = None):
    """A torchao-style safetensors file holding ``P.weight`` (and a plain ``model.norm.weight``)."""
    tensors = {f"{P}._weight_{a}": t for a, t in attrs.items()}
    tensors["model.norm.weight"] = torch.ones(8, dtype=torch.bfloat16)
    meta = {f"{P}.weight": _entry(kind, data, list(attrs) if names is None else names),
            "model.norm.weight": json.dumps({"_type": "Tensor"}),
            "tensor_names": json.dumps([f"{P}.weight", "model.norm.weight"]), "format": "pt"}
    save_file(tensors, str(tmp_path / "model.safetensors"), metadata=meta)
    return load_checkpoint(tmp_path / "model.safetensors")


def _read(tmp_path, kind, data, attrs):
    ck = _file(tmp_path, kind, data, attrs)
    return read_torchao(ck.tensors, P, ck.quant_config)


def _swizzle_index(r: int, c: int, cols: int) -> int:
    """Offset of scale (r, c) in cuBLAS' 128x4 block-scale layout of a grid ``cols`` wide."""
    col_blocks = -(-cols // 4)
    return ((r // 128) * col_blocks + c // 4) * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + c % 4


def _swizzled(scale: torch.Tensor, view_rows: int) -> torch.Tensor:
    rows, cols = scale.shape
    rp, cp = -(-rows // 128) * 128, -(-cols // 4) * 4
    flat = torch.zeros(rp * cp, dtype=torch.uint8)
    b = scale.view(torch.uint8)
    for r in range(rows):
        for c in range(cols):
            flat[_swizzle_index(r, c, cols)] = b[r, c]
    return flat.view(view_rows, -1).view(scale.dtype)


def _exact(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    assert torch.equal(got.view(torch.int32), want.view(torch.int32))


# ------------------------------------------------------------------------------------------ header
@pytest.mark.parametrize("meta", [
    None, {"format": "pt"}, {"tensor_names": "[not json"}, {"tensor_names": json.dumps(["a.weight"])},  # no entry for a.weight
    {"tensor_names": json.dumps({"a": 1}), "a": "x"},
])
def test_header_that_is_not_torchao(meta):
    """Another writer's header (even one with a 'tensor_names' key) is left alone."""
    assert torchao_config(meta) is None


@pytest.mark.parametrize("meta,match", [
    ({"tensor_names": json.dumps(["a.weight"]), "a.weight": "{"}, "metadata for 'a.weight' is not valid JSON"),
    ({"tensor_names": json.dumps(["a.weight"]), "a.weight": json.dumps([1])}, "must be a JSON object with a '_type'"),
    ({"tensor_names": json.dumps(["a.weight"]), "a.weight": json.dumps({"_type": "Float8Tensor"})}, "needs '_data'"),
])
def test_bad_header(meta, match):
    with pytest.raises(ValueError, match=match):
        torchao_config(meta)


def test_load_checkpoint_keeps_the_header(tmp_path):
    q = torch.zeros(4, 32, dtype=torch.float8_e4m3fn)
    ck = _file(tmp_path, "Float8Tensor", {"block_size": [1, 32], "dtype": _dt("bfloat16")}, {"qdata": q, "scale": torch.ones(4, 1)})
    assert ck.quant_config["producer"] == {"name": "torchao"}
    assert set(ck.quant_config["tensors"]) == {f"{P}.weight", "model.norm.weight"}
    assert torchao_layers(ck.quant_config) == [P]
    dense = read_torchao(ck.tensors, "model.norm", ck.quant_config)
    assert dense.variant == "dense" and dense.fmt is ck.tensors["model.norm.weight"]


def test_torchao_header_and_quant_config_file_refused(tmp_path):
    (tmp_path / QUANT_CONFIG_NAME).write_text(json.dumps(modelopt_quant_config()))
    with pytest.raises(ValueError, match="torchao-written safetensors and a hf_quant_config.json"):
        _file(tmp_path, "Float8Tensor", {"block_size": [1, 32], "dtype": _dt("bfloat16")},
              {"qdata": torch.zeros(4, 32, dtype=torch.float8_e4m3fn), "scale": torch.ones(4, 1)})


def test_plain_checkpoint_has_no_quant_config(tmp_path):
    save_file({"w": torch.ones(2)}, str(tmp_path / "a.safetensors"), metadata={"format": "pt"})
    assert load_checkpoint(tmp_path / "a.safetensors").quant_config is None


# ------------------------------------------------------------------------------------------ float8
@pytest.mark.parametrize("block,scale_shape,variant", [
    ((96, 256), (1, 1), "fp8-tensor-torchao"), ((1, 256), (96, 1), "fp8-row-torchao"),
    ((32, 32), (3, 8), "fp8-block-torchao"), ((1, 64), (96, 4), "fp8-group-torchao"),
])
def test_float8(tmp_path, block, scale_shape, variant):
    g = torch.Generator().manual_seed(0)
    q = (torch.randn(96, 256, generator=g) * 50).to(torch.float8_e4m3fn)
    scale = torch.rand(scale_shape, generator=g) * 0.01 + 1e-4
    layer = _read(tmp_path, "Float8Tensor", {"block_size": list(block), "dtype": _dt("bfloat16")}, {"qdata": q, "scale": scale})
    assert isinstance(layer.fmt, FP8) and layer.variant == variant and layer.options["dtype"] == torch.bfloat16
    want = torch.empty(96, 256)
    for r in range(96):
        for c in range(256):
            want[r, c] = q[r, c].float() * scale[r // block[0] if scale_shape[0] > 1 else 0, c // block[1] if scale_shape[1] > 1 else 0]
    _exact(layer.fmt.dequantize(), want)


@pytest.mark.parametrize("block", [[32, 64], [64, 1], [7, 7]])
def test_float8_other_blocks_refused(tmp_path, block):
    q = torch.zeros(64, 128, dtype=torch.float8_e4m3fn)
    s = torch.ones(64 // block[0], 128 // block[1])
    with pytest.raises(ValueError, match=rf"torchao Float8Tensor with block_size \[{block[0]}, {block[1]}\]"):
        _read(tmp_path, "Float8Tensor", {"block_size": block, "dtype": _dt("bfloat16")}, {"qdata": q, "scale": s})


def test_float8_scale_shape_named(tmp_path):
    q = torch.zeros(64, 128, dtype=torch.float8_e4m3fn)
    with pytest.raises(ValueError, match=rf"tensor '{P}._weight_scale' has shape \(64, 2\), expected \(64, 1\)"):
        _read(tmp_path, "Float8Tensor", {"block_size": [1, 128], "dtype": _dt("bfloat16")}, {"qdata": q, "scale": torch.ones(64, 2)})


def test_float8_e5m2_refused(tmp_path):
    q = torch.zeros(4, 32, dtype=torch.float8_e5m2)
    with pytest.raises(ValueError, match="torchao Float8Tensor with torch.float8_e5m2 data"):
        _read(tmp_path, "Float8Tensor", {"block_size": [1, 32], "dtype": _dt("bfloat16")}, {"qdata": q, "scale": torch.ones(4, 1)})


def test_missing_tensor_named(tmp_path):
    q = torch.zeros(4, 32, dtype=torch.float8_e4m3fn)
    ck = _file(tmp_path, "Float8Tensor", {"block_size": [1, 32], "dtype": _dt("bfloat16")}, {"qdata": q})
    with pytest.raises(ValueError, match=rf"no tensor '{P}._weight_scale'"):
        read_torchao(ck.tensors, P, ck.quant_config)
    with pytest.raises(ValueError, match="has no entry 'model.layers.1.mlp.down_proj.weight'"):
        read_torchao(ck.tensors, "model.layers.1.mlp.down_proj", ck.quant_config)


def test_listed_tensor_missing_named(tmp_path):
    """A tensor the header lists but the file lacks (a zero-point, here) is an error, not a default."""
    q = torch.zeros(4, 64, dtype=torch.int8)
    ck = _file(tmp_path, "Int8Tensor", {"block_size": [1, 64], "dtype": _dt("bfloat16")}, {"qdata": q, "scale": torch.ones(4, 1)},
               names=["zero_point", "qdata", "scale"])
    with pytest.raises(ValueError, match=rf"torchao Int8Tensor: checkpoint has no tensor '{P}._weight_zero_point'"):
        read_torchao(ck.tensors, P, ck.quant_config)


# ----------------------------------------------------------------------------------------------- MX
def _mx_codes(n: int, k: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, 16, (n, k), generator=g, dtype=torch.uint8)
    exps = torch.randint(100, 140, (n, k // 32), generator=g, dtype=torch.uint8)
    exps[0, 0], exps[1, 1] = 0, 0xFF  # 2^-127 and NaN
    return codes, exps


def _e2m1(code: int) -> float:
    return (-1.0 if code & 8 else 1.0) * E2M1[code & 7]


def _mx_want(codes, exps, elem) -> torch.Tensor:
    n, k = codes.shape if elem is None else elem.shape
    want = torch.empty(n, k)
    for r in range(n):
        for c in range(k):
            e = int(exps[r, c // 32])
            s = float("nan") if e == 0xFF else 2.0 ** (e - 127)
            v = _e2m1(int(codes[r, c])) if elem is None else float(elem[r, c].float())
            want[r, c] = torch.tensor(v, dtype=torch.float32) * torch.tensor(s, dtype=torch.float32)
    return want


@pytest.mark.parametrize("swizzled", [True, False])
def test_mxfp4(tmp_path, swizzled):
    n, k = 130, 96  # 2 row blocks, 3 of 4 scale columns: the swizzled grid is padded both ways
    codes, exps = _mx_codes(n, k, 1)
    packed = codes[:, 0::2] | (codes[:, 1::2] << 4)
    scale = exps.view(torch.float8_e8m0fnu)
    if swizzled:
        scale = _swizzled(scale, 64)
    data = {"elem_dtype": _dt("float4_e2m1fn_x2"), "block_size": 32, "orig_dtype": _dt("bfloat16"), "is_swizzled_scales": swizzled}
    layer = _read(tmp_path, "MXTensor", data, {"qdata": packed, "scale": scale})
    assert isinstance(layer.fmt, MXFP4) and layer.variant == "mxfp4-torchao"
    _exact(layer.fmt.dequantize(), _mx_want(codes, exps, None))


@pytest.mark.parametrize("swizzled", [True, False])
def test_mxfp8(tmp_path, swizzled):
    n, k = 40, 64
    _, exps = _mx_codes(n, k, 2)
    elem = (torch.randn(n, k, generator=torch.Generator().manual_seed(3)) * 100).to(torch.float8_e4m3fn)
    scale = exps.view(torch.float8_e8m0fnu)
    data = {"elem_dtype": _dt("float8_e4m3fn"), "block_size": 32, "orig_dtype": _dt("float32"), "is_swizzled_scales": swizzled}
    layer = _read(tmp_path, "MXTensor", data, {"qdata": elem, "scale": _swizzled(scale, 32) if swizzled else scale})
    assert isinstance(layer.fmt, FP8) and layer.fmt.scale_fmt == "ue8m0" and layer.variant == "mxfp8-torchao"
    _exact(layer.fmt.dequantize(), _mx_want(None, exps, elem))


@pytest.mark.parametrize("elem,block,match", [
    ("float8_e5m2", 32, "MXTensor with float8_e5m2 elements"), ("float4_e2m1fn_x2", 16, "MXFP4 has blocks of 32"),
    ("fp6_e3m2", 32, "MXTensor with fp6_e3m2 elements"),  # torchao names its FP6 types by plain strings
])
def test_mx_refused(tmp_path, elem, block, match):
    qd = torch.float8_e5m2 if elem == "float8_e5m2" else torch.uint8
    data = {"elem_dtype": elem if elem.startswith("fp6") else _dt(elem), "block_size": block, "orig_dtype": _dt("bfloat16"), "is_swizzled_scales": False}
    with pytest.raises(ValueError, match=match):
        _read(tmp_path, "MXTensor", data, {"qdata": torch.zeros(4, 32, dtype=qd), "scale": torch.zeros(4, 2, dtype=torch.uint8)})


# --------------------------------------------------------------------------------------------- NVFP4
@pytest.mark.parametrize("per_tensor", [True, False])
def test_nvfp4(tmp_path, per_tensor):
    n, k = 144, 48
    g = torch.Generator().manual_seed(4)
    codes = torch.randint(0, 16, (n, k), generator=g, dtype=torch.uint8)
    scale = (torch.rand(n, k // 16, generator=g) * 400).to(torch.float8_e4m3fn)
    attrs = {"qdata": codes[:, 0::2] | (codes[:, 1::2] << 4), "scale": _swizzled(scale, 64)}
    gs = 0.0123
    if per_tensor:  # with a static activation scale beside it, which the layer hands back as stored
        attrs["per_tensor_scale"] = torch.tensor(gs)
        attrs["act_per_tensor_scale"] = torch.tensor(0.5)
    layer = _read(tmp_path, "NVFP4Tensor", {"block_size": 16, "is_swizzled_scales": True, "orig_dtype": _dt("bfloat16")}, attrs)
    assert isinstance(layer.fmt, NVFP4) and layer.variant == "nvfp4-torchao"
    assert list(layer.options["activation"]) == (["act_per_tensor_scale"] if per_tensor else [])
    want = torch.empty(n, k)
    for r in range(n):
        for c in range(k):
            s = scale[r, c // 16].float() * (torch.tensor(gs) if per_tensor else 1.0)  # torchao: per_tensor_scale * scale
            want[r, c] = torch.tensor(_e2m1(int(codes[r, c]))) * s
    _exact(layer.fmt.dequantize(), want)


# ------------------------------------------------------------------------------------------ integers
@pytest.mark.parametrize("bits,target", [(2, "int2"), (4, "int4"), (8, "int8")])
def test_intx(tmp_path, bits, target):
    n, k, gs = 24, 96, 32
    g = torch.Generator().manual_seed(bits)
    half = 1 << (bits - 1)
    q = torch.randint(-half, half, (n, k), generator=g).to(torch.int8)
    zp = torch.randint(-half, half, (n, k // gs), generator=g).to(torch.int8)
    scale = (torch.rand(n, k // gs, generator=g) + 0.01).to(torch.bfloat16)
    q[2, :gs] = zp[2, 0]  # an all-zero group, with torchao's scale for it (finfo.tiny: not an fp16 value)
    scale[2, 0] = torch.finfo(torch.bfloat16).tiny
    layer = _read(tmp_path, "IntxUnpackedToInt8Tensor", {"target_dtype": _dt(target), "block_size": [1, gs], "dtype": _dt("bfloat16")},
                  {"qdata": q, "scale": scale, "zero_point": zp})
    assert isinstance(layer.fmt, INTx) and layer.fmt.bits == bits and layer.variant == "int-torchao"
    want = torch.empty(n, k)
    for r in range(n):
        for c in range(k):
            want[r, c] = (int(q[r, c]) - int(zp[r, c // gs])) * float(scale[r, c // gs])  # exact in fp32
    _exact(layer.fmt.dequantize(), want)
    assert not bool(layer.fmt.dequantize()[2, :gs].any())


def test_int8_tensor_per_tensor(tmp_path):
    q = torch.randint(-127, 128, (16, 64), generator=torch.Generator().manual_seed(5)).to(torch.int8)
    layer = _read(tmp_path, "Int8Tensor", {"block_size": [16, 64], "dtype": _dt("float16")},
                  {"zero_point": torch.zeros(1, 1, dtype=torch.int8), "qdata": q, "scale": torch.tensor([[0.0078125]])})
    assert layer.fmt.bits == 8 and layer.options["dtype"] == torch.float16
    _exact(layer.fmt.dequantize(), q.float() * 0.0078125)


@pytest.mark.parametrize("kind,data,attrs,match", [
    ("IntxUnpackedToInt8Tensor", {"target_dtype": _dt("int3"), "block_size": [1, 32], "dtype": _dt("bfloat16")}, None,
     r"IntxUnpackedToInt8Tensor with target_dtype int3 \(3-bit codes\)"),
    ("IntxUnpackedToInt8Tensor", {"target_dtype": _dt("int4"), "block_size": [1, 32], "dtype": _dt("bfloat16")}, "fp32",
     r"IntxUnpackedToInt8Tensor \(int4\): tensor .*_weight_scale.* fp16 cannot hold exactly"),
    ("IntxUnpackedToInt8Tensor", {"target_dtype": _dt("int4"), "block_size": [1, 32], "dtype": _dt("bfloat16")}, "wide",
     r"qdata holds codes outside \[-8, 7\]"),
    ("Int8Tensor", {"block_size": [2, 32], "dtype": _dt("bfloat16")}, None, r"Int8Tensor with block_size \[2, 32\]"),
    ("Int4Tensor", {"block_size": [1, 32], "shape": [4, 64]}, None, r"torchao Int4Tensor \(int4 weights packed for mslk"),
    ("Int4TilePackedTo4dTensor", {"block_size": [1, 32], "shape": [4, 64]}, None, r"torchao Int4TilePackedTo4dTensor \(.*tinygemm"),
    ("Int4PlainInt32Tensor", {"block_size": [1, 32], "shape": [4, 64]}, None, r"torchao Int4PlainInt32Tensor \(.*XPU"),
    ("NF4Tensor", {}, None, r"holds a torchao NF4Tensor, a torchao layout lowbit does not read"),
])
def test_refused(tmp_path, kind, data, attrs, match):
    q = torch.zeros(4, 64, dtype=torch.int8)
    scale = torch.full((4, 2), 0.5, dtype=torch.bfloat16)
    if attrs == "fp32":
        scale = torch.full((4, 2), 0.1, dtype=torch.float32)
        q[0, 0] = 1  # a group that is not all zero-points: its scale counts
    if attrs == "wide":
        q[0, 0] = 8
    with pytest.raises(ValueError, match=match) as e:
        _read(tmp_path, kind, data, {"qdata": q, "scale": scale, "zero_point": torch.zeros(4, 2, dtype=torch.int8)})
    assert "unknown" not in str(e.value)


def test_read_layer_points_torchao_names_to_read_torchao():
    from lowbit.io.layer import read_layer

    tensors = {"m._weight_qdata": torch.zeros(4, 16, dtype=torch.int8), "m._weight_scale": torch.ones(4, 1)}
    with pytest.raises(ValueError, match="torchao.*read_torchao"):
        read_layer(tensors, "m")
