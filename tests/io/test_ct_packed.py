"""compressed-tensors MXFP4 (mxfp4-pack-quantized) and integer pack-quantized layers.

The integer layout, per linear <prefix> (format "pack-quantized", type int, num_bits b, strategy
group or channel), pf = 32 // b codes per int32 word, codes stored unsigned (signed code + 2^(b-1)):
  weight_packed int32 [N, ceil(K/pf)] (column k in word k // pf, bits (k % pf) * b), weight_scale
  [N, ceil(K/G)], weight_zero_point int32 [ceil(N/pf), ceil(K/G)] packed along N (asymmetric only),
  weight_shape int64 [2]; w = (u - u_zero) * scale, u_zero = 2^(b-1) when symmetric.
The oracle below decodes the words element by element in Python integers, independent of
lowbit's packer.
"""
from __future__ import annotations

import pytest
import torch

from lowbit.formats import MXFP4, INTx
from lowbit.formats.intx import pack_planes
from lowbit.io import (
    INT_CT, MXFP4_CT, detect_format, read_int_ct, read_layer, read_mxfp4_ct, write_int_ct, write_layer, write_mxfp4_ct,
)
from tests.io._util import assert_same_bytes

P = "model.layers.0.mlp.down_proj"


def _oracle(sd: dict, bits: int, group: int) -> torch.Tensor:
    n, k = (int(x) for x in sd[f"{P}.weight_shape"].tolist())
    pf, mask = 32 // bits, (1 << bits) - 1
    words = sd[f"{P}.weight_packed"].tolist()
    scale = sd[f"{P}.weight_scale"].double().tolist()
    zp = sd[f"{P}.weight_zero_point"].tolist() if f"{P}.weight_zero_point" in sd else None
    out = torch.empty(n, k, dtype=torch.float64)
    for r in range(n):
        for c in range(k):
            u = ((words[r][c // pf] & 0xFFFFFFFF) >> ((c % pf) * bits)) & mask
            g = c // group
            z = 1 << (bits - 1) if zp is None else ((zp[r // pf][g] & 0xFFFFFFFF) >> ((r % pf) * bits)) & mask
            out[r, c] = (u - z) * scale[r][g]
    return out


def _random_ct(n, k, bits, group, symmetric=False, scale_dtype=torch.float16, seed=0):
    g = torch.Generator().manual_seed(seed)
    pf, groups = 32 // bits, -(-k // group)
    words = torch.randint(-2**31, 2**31, (n, -(-k // pf)), generator=g, dtype=torch.int64).to(torch.int32)
    sd = {f"{P}.weight_packed": words,
          f"{P}.weight_scale": (torch.rand(n, groups, generator=g) * 0.05 + 1e-3).to(torch.float16).to(scale_dtype),
          f"{P}.weight_shape": torch.tensor([n, k])}
    if not symmetric:
        sd[f"{P}.weight_zero_point"] = torch.randint(-2**31, 2**31, (-(-n // pf), groups), generator=g, dtype=torch.int64).to(torch.int32)
    return sd


def test_int_layout_pin():
    # 4 bits, N = 8, K = 16, G = 16: code (n + k) % 16, zero-point n, scale 0.5
    codes = torch.tensor([[(n + k) % 16 for k in range(16)] for n in range(8)], dtype=torch.uint8)
    q = torch.cat([codes, torch.arange(8, dtype=torch.uint8)[:, None].expand(8, 16)], 1)  # plane-split padding: q = z
    fmt = INTx(pack_planes(q.contiguous(), 4), torch.full((8, 2), 0.5, dtype=torch.float16),
               torch.tensor([[n, 0] for n in range(8)], dtype=torch.uint8), 4, 16, 16)
    sd = write_int_ct(fmt, P)
    packed, zp = sd[f"{P}.weight_packed"], sd[f"{P}.weight_zero_point"]
    assert packed.dtype == torch.int32 and packed.shape == (8, 2) and zp.shape == (1, 1)
    assert packed[0].tolist() == [0x76543210, 0xFEDCBA98 - 2**32]
    assert packed[1, 0].item() == 0x87654321 - 2**32
    assert zp.item() == 0x76543210
    assert sd[f"{P}.weight_shape"].tolist() == [8, 16] and sd[f"{P}.weight_scale"].shape == (8, 1)
    assert torch.equal(read_int_ct(sd, P).dequantize(torch.float64), _oracle(sd, 4, 16))


@pytest.mark.parametrize("bits", [2, 4, 8])
@pytest.mark.parametrize("n,k,group", [(40, 576, 64), (33, 96, 32), (8, 48, 16), (24, 128, 128)])
def test_int_quantized_roundtrip_bit_exact(bits, n, k, group):
    w = torch.randn(n, k, generator=torch.Generator().manual_seed(bits * k))
    q = INTx.quantize(w, bits, group)
    sd = write_int_ct(q, P)
    assert sd[f"{P}.weight_packed"].shape == (n, -(-k * bits // 32)) and sd[f"{P}.weight_scale"].dtype == torch.float16
    back = read_int_ct(sd, P)
    assert (back.bits, back.group_size, back.k) == (bits, group, k)
    assert torch.equal(back.packed, q.packed) and torch.equal(back.scale, q.scale) and torch.equal(back.zero, q.zero)
    assert torch.equal(back.dequantize(torch.float64), _oracle(sd, bits, group))
    layer = read_layer(sd, P)
    assert layer.variant == INT_CT and detect_format(sd, P) == INT_CT
    assert_same_bytes(write_layer(layer, P), sd)


@pytest.mark.parametrize("bits,group,symmetric,scale_dtype", [
    (4, 32, False, torch.float16), (4, 32, True, torch.bfloat16), (8, 128, False, torch.float32), (2, 16, True, torch.float32),
    (8, 96, True, torch.float16),  # channel-like: one group per row
])
def test_int_foreign_checkpoint_reads_exactly_and_writes_back(bits, group, symmetric, scale_dtype):
    n, k = 40, 96
    sd = _random_ct(n, k, bits, group, symmetric, scale_dtype, seed=bits + group)
    # a foreign writer leaves the unused bits of the last word zero
    pf = 32 // bits
    if k % pf:
        sd[f"{P}.weight_packed"][:, -1] &= (1 << (k % pf) * bits) - 1
    if not symmetric and n % pf:
        sd[f"{P}.weight_zero_point"][-1] &= (1 << (n % pf) * bits) - 1
    layer = read_layer(sd, P)
    assert layer.variant == INT_CT and layer.options == {"symmetric": symmetric, "scale_dtype": scale_dtype}
    assert torch.equal(layer.fmt.dequantize(torch.float64), _oracle(sd, bits, group))
    assert_same_bytes(write_layer(layer, P), sd)


def test_int_symmetric_write_needs_the_midpoint_zero():
    q = INTx.quantize(torch.randn(16, 64), 4, 64)
    with pytest.raises(ValueError, match="symmetric pack-quantized needs every zero-point to be 8"):
        write_int_ct(q, P, symmetric=True)
    mid = INTx(q.packed, q.scale, torch.full_like(q.zero, 8), 4, 64, 64)
    sd = write_int_ct(mid, P, symmetric=True)
    assert f"{P}.weight_zero_point" not in sd
    assert torch.equal(read_int_ct(sd, P).dequantize(), mid.dequantize())


def test_int_writer_rejects():
    q = INTx.quantize(torch.randn(16, 64), 4, 64)
    with pytest.raises(ValueError, match="needs an INTx"):
        write_int_ct(MXFP4.quantize(torch.randn(4, 32)), P)
    with pytest.raises(ValueError, match="scale_dtype"):
        write_int_ct(q, P, scale_dtype=torch.float64)
    odd = INTx(q.packed, (q.scale.float() * 1.0009765625).to(torch.float16), q.zero, 4, 64, 64)  # 11 mantissa bits
    with pytest.raises(ValueError, match="not all exactly representable in torch.bfloat16"):
        write_int_ct(odd, P, scale_dtype=torch.bfloat16)


def _bad(sd, name, value):
    out = dict(sd)
    if value is None:
        del out[f"{P}.{name}"]
    else:
        out[f"{P}.{name}"] = value
    return out


BASE = _random_ct(40, 96, 4, 32)


@pytest.mark.parametrize("sd,match", [
    (_bad(BASE, "weight_packed", BASE[f"{P}.weight_packed"].to(torch.int64)), "weight_packed' has dtype"),
    (_bad(BASE, "weight_packed", BASE[f"{P}.weight_packed"][:, :5].contiguous()), "weight_packed' has shape"),
    (_bad(BASE, "weight_packed", BASE[f"{P}.weight_packed"][:30].contiguous()), r"weight_packed' has shape \(30, 12\) but"),
    (_bad(BASE, "weight_scale", BASE[f"{P}.weight_scale"][:, :2].contiguous()), r"weight_zero_point' has shape \(5, 3\), expected \(5, 2\)"),
    (_bad(BASE, "weight_scale", BASE[f"{P}.weight_scale"][:39].contiguous()), r"weight_scale' has shape \(39, 3\)"),
    (_bad(BASE, "weight_scale", BASE[f"{P}.weight_scale"].double()), "weight_scale' has dtype"),
    (_bad(BASE, "weight_scale", BASE[f"{P}.weight_scale"].float() + 1e-7), "weight_scale' holds .* fp16 cannot hold exactly"),
    (_bad(BASE, "weight_zero_point", BASE[f"{P}.weight_zero_point"][:, :2].contiguous()), "weight_zero_point' has shape"),
    (_bad(BASE, "weight_zero_point", BASE[f"{P}.weight_zero_point"].to(torch.uint8)), "weight_zero_point' has dtype"),
    (_bad(BASE, "weight_shape", torch.tensor([40.0, 96.0])), "weight_shape' has dtype"),
    (_bad(BASE, "weight_shape", torch.tensor([40, 96, 1])), "weight_shape' has shape"),
    (_bad(BASE, "weight_shape", torch.tensor([40, 0])), r"weight_shape' holds \[40, 0\]"),
    (_bad(BASE, "weight_shape", torch.tensor([40, 97])), "weight_packed' has shape .* K = 97"),
    (_random_ct(8, 96, 4, 8), "has 12 groups for K = 96: no group size that is a multiple of 16 fits"),
    (_random_ct(8, 72, 4, 24), "K = 72; lowbit's INTx needs K % 16 == 0"),
    (_random_ct(8, 80, 4, 48), "has 2 groups for K = 80: group sizes \\[48, 64\\] all fit; pass group_size"),
    (_random_ct(8, 96, 4, 2), "has 48 groups for K = 96: no group size that is a multiple of 16 fits"),
])
def test_int_hostile_tensors_raise_naming_the_tensor(sd, match):
    with pytest.raises(ValueError, match=match):
        read_layer(sd, P)


def test_int_explicit_parameters():
    sd = _random_ct(8, 96, 4, 64)  # a partial last group: the shapes alone read it as G = 48
    assert read_int_ct(sd, P).group_size == 48
    fmt = read_int_ct(sd, P, group_size=64)
    assert fmt.group_size == 64 and torch.equal(fmt.dequantize(torch.float64), _oracle(sd, 4, 64))
    with pytest.raises(ValueError, match="expected \\(8, 6\\) for K = 96 and group size 16"):
        read_int_ct(sd, P, group_size=16)
    with pytest.raises(ValueError, match="group size 8; lowbit's INTx needs a multiple of 16"):
        read_int_ct(_random_ct(8, 96, 4, 8), P, group_size=8)
    sd3 = _random_ct(8, 96, 4, 32) | {f"{P}.weight_packed": torch.zeros(8, 10, dtype=torch.int32)}  # 3-bit: 10 codes a word
    with pytest.raises(ValueError, match="no bit width lowbit reads"):
        read_int_ct(sd3, P)
    with pytest.raises(ValueError, match="3-bit codes; lowbit's INTx reads"):
        read_int_ct(sd3, P, num_bits=3)
    with pytest.raises(ValueError, match="expected \\(8, 24\\) for 8-bit"):
        read_int_ct(sd, P, num_bits=8)


def test_mxfp4_roundtrip_and_values():
    w = torch.randn(24, 96, generator=torch.Generator().manual_seed(3))
    q = MXFP4.quantize(w)
    for scale_dtype in (torch.uint8, torch.float8_e8m0fnu):
        sd = write_mxfp4_ct(q, P, scale_dtype=scale_dtype)
        assert sorted(sd) == [f"{P}.weight_packed", f"{P}.weight_scale"] and sd[f"{P}.weight_scale"].dtype == scale_dtype
        layer = read_layer(sd, P)
        assert layer.variant == MXFP4_CT and torch.equal(layer.fmt.dequantize(), q.dequantize())
        assert_same_bytes(write_layer(layer, P), sd)
    # layout pin: byte 0x31 is [0.5, 1.5] at scale byte 127 (2^0)
    sd = {f"{P}.weight_packed": torch.full((1, 16), 0x31, dtype=torch.uint8), f"{P}.weight_scale": torch.full((1, 1), 127, dtype=torch.uint8)}
    assert read_mxfp4_ct(sd, P).dequantize()[0, :4].tolist() == [0.5, 1.5, 0.5, 1.5]


@pytest.mark.parametrize("name,bad,match", [
    ("weight_scale", torch.full((4, 2), 127, dtype=torch.uint8), "weight_scale' has shape"),
    ("weight_scale", torch.full((4, 1), 127, dtype=torch.int16), "weight_scale' has dtype"),
    ("weight_packed", torch.zeros(4, 8, dtype=torch.uint8), "K = 16 is not a multiple of 32"),
])
def test_mxfp4_hostile_tensors(name, bad, match):
    sd = write_mxfp4_ct(MXFP4.quantize(torch.randn(4, 32)), P)
    sd[f"{P}.{name}"] = bad
    with pytest.raises(ValueError, match=match):
        read_mxfp4_ct(sd, P)
    with pytest.raises(ValueError, match="needs an MXFP4"):
        write_mxfp4_ct(INTx.quantize(torch.randn(4, 32), 4, 32), P)


def test_packed_layouts_still_refused_name_what_they_saw():
    nv_no_global = {f"{P}.weight_packed": torch.zeros(8, 32, dtype=torch.uint8), f"{P}.weight_scale": torch.zeros(8, 4, dtype=torch.float8_e4m3fn)}
    with pytest.raises(ValueError, match="weight_scale float8_e4m3fn \\[8, 4\\].*lowbit reads:"):
        read_layer(nv_no_global, P)
    no_shape = {f"{P}.weight_packed": torch.zeros(8, 8, dtype=torch.int32), f"{P}.weight_scale": torch.ones(8, 2, dtype=torch.bfloat16)}
    with pytest.raises(ValueError, match=r"pack-quantized integer weights \(int32 words\) without the weight_shape.*lowbit reads:"):
        read_layer(no_shape, P)
