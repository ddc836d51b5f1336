"""Non-finite operands of ``fp8_gemm`` / ``fp4_gemm``: what the GEMMs do with them, fuzzed.

Policy (the GEMMs check no values: that would cost a pass over the operands, or a host sync): a
non-finite operand reaches exactly the outputs that use it, as IEEE arithmetic has it.

* A NaN scale (``a_s`` or ``b_s``: fp32 NaN, UE8M0 byte 0xFF) or an E4M3 NaN code (0x7F / 0xFF) in
  ``a`` or ``b`` makes NaN every output it enters: a row of ``a`` / ``a_s`` its row of C, a row of
  ``b`` its column, an FP8 ``b_s`` block its 128 columns, an FP4 ``b_s`` group its column.
* An inf scale (fp32 ``a_s`` / ``b_s``) makes those outputs non-finite: +-inf, or NaN where a block's
  dot is 0 (inf x 0) or infinities of both signs meet.
* Every other output is the usual result, within the bound ``tests/fuzz/test_fuzz_ops`` derives.

Triton 3.6's CPU interpreter decodes the E4M3 NaN codes as +-480 (its fp8 cast has no NaN), so on
the interpreter tier only non-finite scales are drawn; the reference and GPU tiers draw NaN codes
too. fp64 oracle: the dequantized operands with the non-finite entries zeroed (the outputs that use
them are checked by the masks above, not against it).
"""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lowbit.ops import fp4_gemm, fp8_gemm
from tests.fuzz.test_fuzz_ops import FUZZ, dec_e2m1, dec_e4m3, dec_ue8m0, gemm_bound, random_e4m3, run, unpack_nibbles

KINDS8 = ["a_code", "b_code", "a_s_nan", "a_s_inf", "b_s_nan", "b_s_inf"]


@st.composite
def nf_case(draw, kinds):
    """Shapes as in ``test_fuzz_ops`` (M up to 40: the FP4 tiled kernel's M > 32 form), and up to two
    non-finite kinds besides the test's own (``first``)."""
    return dict(lead=draw(st.sampled_from([(1,), (3,), (2, 3), (17,), (40,)])), n=draw(st.integers(1, 200)),
                kb=draw(st.integers(1, 3)), e8m0=draw(st.booleans()),
                bad=draw(st.lists(st.sampled_from(kinds), max_size=2)), seed=draw(st.integers(0, 2**31 - 1)))


NF_FUZZ = settings(FUZZ, max_examples=4)  # per kind: 24 / 16 examples a tier


def _pick(gen, *sizes):
    """A random index into a tensor of shape ``sizes``."""
    return tuple(int(torch.randint(s, (1,), generator=gen)) for s in sizes)


def _check(out, c64, acc_abs, k, nan_dep, inf_dep, what):
    """NaN where ``nan_dep``; non-finite where ``inf_dep`` (and not NaN-dependent); elsewhere within
    the derived bound of the fp64 product."""
    got = out.detach().cpu().double().reshape(c64.shape)
    assert got[nan_dep].isnan().all(), f"{what}: an output using a NaN operand is not NaN"
    only_inf = inf_dep & ~nan_dep
    assert not got[only_inf].isfinite().any(), f"{what}: an output using an inf scale is finite"
    clean = ~nan_dep & ~inf_dep
    _, bound = gemm_bound(acc_abs, k, mma=out.device.type == "cuda")
    err = (got[clean] - c64[clean]).abs()
    b = bound(c64)[clean]
    assert not got[clean].isnan().any(), f"{what}: NaN in an output that uses no non-finite operand"
    assert (err <= b).all(), f"{what}: error x{(err / b).max().item():.3g} over the derived bound"


def _setup(backend, first, case):
    """The tier's skips and marks, then (generator, device, lead dims, M, N, K, K blocks, a e4m3 [M, K])."""
    if backend.name == "interpret" and first.endswith("code"):
        pytest.skip("Triton 3.6's interpreter has no E4M3 NaN (module docstring)")
    gen = torch.Generator().manual_seed(case["seed"])
    lead, n, kb = case["lead"], case["n"], case["kb"]
    m, k = math.prod(lead), 128 * kb
    return gen, backend.device, lead, m, n, k, kb, random_e4m3((m, k), gen, "cpu")


@NF_FUZZ
@pytest.mark.parametrize("first", KINDS8)
@given(case=nf_case(KINDS8))
def test_fp8_gemm_nonfinite_operands(backend, poison_empty, first, case):
    gen, dev, lead, m, n, k, kb, a = _setup(backend, first, case)
    b = random_e4m3((n, k), gen, "cpu")
    nbk = -(-n // 128)
    a_s = torch.rand(m, kb, generator=gen) * 2.0**-5 + 2.0**-12
    b_s = torch.rand(nbk, kb, generator=gen) * 2.0**-5 + 2.0**-12
    if case["e8m0"]:  # UE8M0 scales: powers of two; their one non-finite byte is NaN
        a_s = torch.pow(2.0, torch.randint(-10, -2, (m, kb), generator=gen).float())
        b_s = torch.pow(2.0, torch.randint(-10, -2, (nbk, kb), generator=gen).float())
    for kind in [first, *case["bad"]]:
        if kind.endswith("code"):
            if backend.name == "interpret":
                continue  # the interpreter has no E4M3 NaN (module docstring)
            t, rows = (a, m) if kind == "a_code" else (b, n)
            r, c = _pick(gen, rows, k)
            t.view(torch.uint8)[r, c] = 0x7F if int(torch.randint(2, (1,), generator=gen)) else 0xFF
            continue
        val = float("inf") if kind.endswith("inf") and not case["e8m0"] else float("nan")
        if kind.startswith("a_s"):
            a_s[_pick(gen, m, kb)] = val
        else:
            b_s[_pick(gen, nbk, kb)] = val
    if case["e8m0"]:
        def to_e8m0(s):
            byte = (torch.log2(s.nan_to_num(1.0)).round() + 127).to(torch.uint8)
            return torch.where(s.isnan(), torch.full_like(byte, 0xFF), byte).view(torch.float8_e8m0fnu)

        a_s_t, b_s_t = to_e8m0(a_s), to_e8m0(b_s)
        as64, bs64 = dec_ue8m0(a_s_t), dec_ue8m0(b_s_t)
    else:
        a_s_t, b_s_t = a_s, b_s
        as64, bs64 = a_s.double(), b_s.double()
    out = run(backend, fp8_gemm, a.view(*lead, k).to(dev), a_s_t.view(*lead, kb).to(dev), b.to(dev), b_s_t.to(dev))
    assert out.shape == (*lead, n) and out.dtype == torch.bfloat16
    bs_cols = bs64.repeat_interleave(128, dim=0)[:n]  # b_s row of each output column
    nan_dep = ((dec_e4m3(a).isnan().any(1) | as64.isnan().any(1))[:, None]
               | (dec_e4m3(b).isnan().any(1) | bs_cols.isnan().any(1))[None, :])
    inf_dep = as64.isinf().any(1)[:, None] | bs_cols.isinf().any(1)[None, :]

    def zeroed(t):
        return torch.where(t.isfinite(), t, torch.zeros_like(t))

    a64 = zeroed(dec_e4m3(a)) * zeroed(as64).repeat_interleave(128, dim=-1)
    b64 = zeroed(dec_e4m3(b)) * zeroed(bs64).repeat_interleave(128, dim=0)[:n].repeat_interleave(128, dim=1)
    _check(out, a64 @ b64.T, a64.abs() @ b64.abs().T, k, nan_dep, inf_dep, "fp8_gemm")


KINDS4 = ["a_code", "a_s_nan", "a_s_inf", "b_s_nan"]


@NF_FUZZ
@pytest.mark.parametrize("first", KINDS4)
@given(case=nf_case(KINDS4))
def test_fp4_gemm_nonfinite_operands(backend, poison_empty, first, case):
    """FP4 weights have no NaN code (E2M1 is all finite) and UE8M0 group scales no inf: the
    non-finite operands are E4M3 NaN codes in ``a``, NaN / inf ``a_s`` and 0xFF ``b_s`` bytes."""
    gen, dev, lead, m, n, k, kb, a = _setup(backend, first, case)
    b = torch.randint(0, 256, (n, k // 2), generator=gen).to(torch.uint8)
    b_s = torch.randint(117, 131, (n, k // 32), generator=gen).to(torch.uint8)
    a_s = torch.rand(m, kb, generator=gen) * 2.0**-5 + 2.0**-12
    for kind in [first, *case["bad"]]:
        if kind == "a_code":
            if backend.name == "interpret":
                continue
            a.view(torch.uint8)[_pick(gen, m, k)] = 0x7F
        elif kind == "b_s_nan":
            b_s[_pick(gen, n, k // 32)] = 0xFF
        else:
            a_s[_pick(gen, m, kb)] = float("nan") if kind == "a_s_nan" else float("inf")
    out = run(backend, fp4_gemm, a.view(*lead, k).to(dev), a_s.view(*lead, kb).to(dev), b.to(dev), b_s.to(dev))
    assert out.shape == (*lead, n) and out.dtype == torch.bfloat16
    nan_dep = (dec_e4m3(a).isnan().any(1) | a_s.isnan().any(1))[:, None] | (b_s == 0xFF).any(1)[None, :]
    inf_dep = a_s.isinf().any(1)[:, None] & torch.ones(1, n, dtype=torch.bool)

    def zeroed(t):
        return torch.where(t.isfinite(), t, torch.zeros_like(t))

    a64 = zeroed(dec_e4m3(a)) * zeroed(a_s.double()).repeat_interleave(128, dim=-1)
    b64 = dec_e2m1(unpack_nibbles(b)) * zeroed(dec_ue8m0(b_s)).repeat_interleave(32, dim=1)
    _check(out, a64 @ b64.T, a64.abs() @ b64.abs().T, k * 4, nan_dep, inf_dep, "fp4_gemm")
