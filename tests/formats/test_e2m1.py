"""E2M1 codec: bit-exact against ml_dtypes.float4_e2m1fn, every tie, the nibble layout, policies."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from lowbit.formats import E2M1_VALUES, e2m1_decode, e2m1_encode, e2m1_pack, e2m1_unpack, pack_nibbles, unpack_nibbles
from tests.formats._ref import bits32, e2m1_value, ml_e2m1_codes, nibbles_ref


def test_decode_all_16_codes_bit_exact_vs_ml_dtypes_and_bit_fields():
    codes = torch.arange(16, dtype=torch.uint8)
    ours = e2m1_decode(codes)
    ml = torch.from_numpy(np.arange(16, dtype=np.uint8).view(ml_dtypes.float4_e2m1fn).astype(np.float32))
    assert torch.equal(bits32(ours), bits32(ml))  # bit patterns: -0.0 (code 8) included
    assert [e2m1_value(c) for c in range(16)] == ours.tolist()
    assert torch.equal(bits32(ours), bits32(torch.tensor(E2M1_VALUES)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_decode_output_dtype(dtype):
    out = e2m1_decode(torch.arange(16, dtype=torch.uint8), dtype)
    assert out.dtype == dtype and out.float().tolist() == list(E2M1_VALUES)


def test_decode_ignores_high_bits_and_accepts_int_dtypes():
    c = torch.tensor([0x17, 0xF9], dtype=torch.int32)
    assert e2m1_decode(c).tolist() == [6.0, -0.5]


def test_encode_every_code_value_roundtrips():
    for c in range(16):
        v = torch.tensor([E2M1_VALUES[c]])
        expect = 0 if c == 8 else c  # -0.0 is not < 0: documented to encode as +0
        assert e2m1_encode(v).item() == expect, c


TIES = [(0.25, 0), (0.75, 2), (1.25, 2), (1.75, 4), (2.5, 4), (3.5, 6), (5.0, 6)]


@pytest.mark.parametrize("value,code", TIES + [(-v, c | 8) for v, c in TIES])
def test_every_rounding_tie_goes_to_even(value, code):
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        assert e2m1_encode(torch.tensor([value], dtype=dtype)).item() == code, (value, dtype)
    assert ml_e2m1_codes(torch.tensor([value])).item() == code  # the reference agrees on ties


def test_neighbours_of_every_decision_point_match_ml_dtypes():
    points = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0])
    up = torch.nextafter(points, torch.full_like(points, 100.0))
    down = torch.nextafter(points, torch.zeros_like(points))
    x = torch.cat([points, up, down])
    x = torch.cat([x, -x])
    assert torch.equal(e2m1_encode(x), ml_e2m1_codes(x))
    assert e2m1_encode(torch.tensor([0.2500001])).item() == 1  # just above a tie leaves the even code


def test_encode_matches_ml_dtypes_on_random_values_and_grid_midpoints():
    g = torch.Generator().manual_seed(1)
    mag = torch.exp2(torch.empty(20000).uniform_(-30, 8, generator=g))
    sign = torch.where(torch.rand(20000, generator=g) < 0.5, -1.0, 1.0)
    grid = torch.tensor(E2M1_VALUES[:8])
    mids = (grid[1:] + grid[:-1]) / 2
    x = torch.cat([mag * sign, grid[1:], -grid[1:], mids, -mids, torch.tensor([1e-45, -1e-45, 1e-39, -1e-39])])
    assert torch.equal(e2m1_encode(x), ml_e2m1_codes(x))


def test_saturation_and_infinities():
    x = torch.tensor([6.0, 6.0001, 7.0, 1e30, float("inf"), -6.0, -100.0, float("-inf"), 3.4e38])
    assert e2m1_encode(x).tolist() == [7, 7, 7, 7, 7, 15, 15, 15, 7]


def test_subnormal_and_small_inputs():
    x = torch.tensor([1e-45, 1e-40, 0.2499, -1e-45, -0.1, 0.0])
    assert e2m1_encode(x).tolist() == [0, 0, 0, 8, 8, 0]  # a small negative keeps its sign bit


def test_documented_nan_and_negative_zero_policy_differs_from_ml_dtypes():
    x = torch.tensor([float("nan"), -0.0])
    assert e2m1_encode(x).tolist() == [0, 0]
    assert ml_e2m1_codes(x).tolist() == [8, 8]  # ml_dtypes: both become -0 (0x8)
    assert e2m1_encode(-torch.tensor([float("nan")])).tolist() == [0]  # any NaN sign


def test_fp64_input_is_rounded_once():
    x = torch.tensor([0.25 + 1e-12, 2.5 + 1e-12, 5.0 - 1e-12], dtype=torch.float64)
    assert e2m1_encode(x).tolist() == [1, 5, 6]


def test_layout_pin_0x31():
    b = torch.tensor([[0x31, 0xF0, 0x8A]], dtype=torch.uint8)
    assert unpack_nibbles(b).tolist() == [[1, 3, 0, 15, 10, 8]]
    assert e2m1_unpack(b).tolist() == [[0.5, 1.5, 0.0, -6.0, -1.0, -0.0]]
    assert e2m1_pack(torch.tensor([[0.5, 1.5, 0.0, -6.0, -1.0, -0.1]])).tolist() == [[0x31, 0xF0, 0x8A]]
    # int8 and torch's float4_e2m1fn_x2 hold the same bytes (torch has no fp4 arithmetic on CPU)
    assert e2m1_unpack(b.view(torch.int8)).tolist() == e2m1_unpack(b).tolist()
    assert e2m1_unpack(b.view(torch.float4_e2m1fn_x2)).tolist() == e2m1_unpack(b).tolist()


@given(
    rows=st.integers(1, 5),
    half=st.integers(1, 9),
    seed=st.integers(0, 2**31 - 1),
)
def test_pack_unpack_roundtrip_and_match_loop_reference(rows, half, seed):
    g = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, 16, (rows, 2 * half), dtype=torch.uint8, generator=g)
    packed = pack_nibbles(codes)
    assert packed.shape == (rows, half) and packed.dtype == torch.uint8
    assert torch.equal(unpack_nibbles(packed), codes)
    assert np.array_equal(nibbles_ref(packed), codes.numpy())
    bytes_ = torch.randint(0, 256, (rows, half), dtype=torch.uint8, generator=g)
    assert torch.equal(pack_nibbles(unpack_nibbles(bytes_)), bytes_)


@given(st.lists(st.floats(-50, 50, width=32, allow_subnormal=True), min_size=1, max_size=64))
def test_encode_decode_encode_idempotent(values):
    x = torch.tensor(values, dtype=torch.float32)
    c = e2m1_encode(x)
    assert torch.equal(e2m1_encode(e2m1_decode(c)), torch.where(c == 8, torch.zeros_like(c), c))
    assert torch.equal(c, torch.where(x == 0, torch.zeros_like(c), ml_e2m1_codes(x)))


def test_bad_arguments_raise_value_error():
    with pytest.raises(ValueError, match="floating"):
        e2m1_encode(torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="Tensor"):
        e2m1_encode([1.0])
    with pytest.raises(ValueError, match="even"):
        pack_nibbles(torch.zeros(2, 3, dtype=torch.uint8))
    with pytest.raises(ValueError, match="dtype"):
        pack_nibbles(torch.zeros(2, 4, dtype=torch.int32))
    with pytest.raises(ValueError, match="dtype"):
        e2m1_decode(torch.zeros(4))
    with pytest.raises(ValueError, match="packed must be"):
        e2m1_unpack(torch.zeros(2, 2))
    with pytest.raises(ValueError, match="dtype"):
        unpack_nibbles(torch.zeros(2, 2, dtype=torch.int32))
