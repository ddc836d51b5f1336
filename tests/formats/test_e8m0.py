"""UE8M0: decode bit-exact vs ml_dtypes and torch; round-up vs an exact fp64 ceil(log2)."""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from lowbit.formats import pow2_round_up, ue8m0_decode, ue8m0_round_up
from tests.formats._ref import bits32, ceil_log2


def test_decode_all_256_bytes_bit_exact():
    b = torch.arange(256, dtype=torch.uint8)
    ours = ue8m0_decode(b)
    ml = torch.from_numpy(b.numpy().view(ml_dtypes.float8_e8m0fnu).astype(np.float32))
    th = b.view(torch.float8_e8m0fnu).float()
    finite = torch.arange(256) < 255
    assert torch.equal(bits32(ours[finite]), bits32(ml[finite]))
    assert torch.equal(bits32(ours[finite]), bits32(th[finite]))
    assert torch.isnan(ours[255]) and torch.isnan(ml[255]) and torch.isnan(th[255])
    # a formula of its own: 2^(e-127) in fp64, exactly representable in fp32 for every e < 255
    assert ours[:255].double().tolist() == [math.ldexp(1.0, e - 127) for e in range(255)]
    assert bits32(ours[:1]).item() == 0x00400000  # e = 0 is the fp32 subnormal 2^-127


def test_decode_accepts_torch_e8m0_dtype():
    b = torch.tensor([0, 1, 127, 128, 254, 255], dtype=torch.uint8)
    assert torch.equal(ue8m0_decode(b.view(torch.float8_e8m0fnu)).nan_to_num(), ue8m0_decode(b).nan_to_num())


def _ref_round_up(x: float) -> int:
    """Biased byte of the documented round-up: 2^max(ceil(log2 x), -126); 0 for x == 0; 255 past 2^127."""
    if x == 0.0:
        return 0
    if not math.isfinite(x):
        return 255
    e = max(ceil_log2(x), -126)
    assert e == max(int(np.ceil(np.log2(np.float64(x)))), -126)  # fp64 log2 agrees with frexp here
    return 255 if e > 127 else e + 127


def _check(x: torch.Tensor):
    got = ue8m0_round_up(x).tolist()
    want = [_ref_round_up(v) for v in x.double().tolist()]
    assert got == want


def test_round_up_every_power_of_two_and_its_neighbours():
    p = torch.tensor([math.ldexp(1.0, e) for e in range(-149, 128)], dtype=torch.float32)
    up = torch.nextafter(p, torch.full_like(p, float("inf")))
    down = torch.nextafter(p, torch.zeros_like(p))
    _check(torch.cat([p, up, down[down > 0]]))
    normal = p >= 2.0**-126
    assert torch.equal(ue8m0_decode(ue8m0_round_up(p[normal])), p[normal])  # exact powers stay put


def test_round_up_random_values_normals_and_subnormals():
    g = torch.Generator().manual_seed(3)
    x = torch.exp2(torch.empty(20000, dtype=torch.float64).uniform_(-149, 127.9, generator=g)).float()
    x = x[x > 0]
    _check(x)
    sub = torch.tensor([1e-45, 1e-40, 2.0**-127, 1.1754942e-38])  # all fp32 subnormals -> 2^-126 (byte 1)
    assert ue8m0_round_up(sub).tolist() == [1, 1, 1, 1]


def test_round_up_special_values():
    above = torch.nextafter(torch.tensor(2.0**127), torch.tensor(float("inf"))).item()
    x = torch.tensor([0.0, float("inf"), float("nan"), 2.0**127, above, 3.4e38])
    assert ue8m0_round_up(x).tolist() == [0, 255, 255, 254, 255, 255]


@given(st.floats(min_value=2.0**-126, max_value=2.0**127, width=32))
def test_pow2_round_up_is_the_smallest_power_of_two_at_or_above(v):
    x = torch.tensor([v], dtype=torch.float32)
    p = pow2_round_up(x).item()
    assert p >= v and p / 2 < v
    assert math.frexp(p)[0] == 0.5


def test_decode_rejects_non_tensor():
    with pytest.raises(ValueError):
        ue8m0_decode([1, 2])
