"""Fuzz the quantization ops' remaining variants against independent fp64 oracles: ``act_quant`` with
UE8M0 (power-of-two) scales, ``fp4_act_quant`` with E4M3 scales (``block_size=16``, the compressed KV
cache format), both with NaN / inf groups, and ``weight_dequant`` on any shape, both scale dtypes and
non-finite codes / scales.

The oracles decode bytes with integer arithmetic (``tests/fuzz/test_fuzz_ops``' decoders) and round
with an explicit grid search, never through ``lowbit.formats`` nor the ops' references. Every test
runs on the reference and interpreter tiers (and the cuda tier on a GPU) with NaN-poisoned buffers.
"""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lowbit.ops import act_quant, fp4_act_quant, weight_dequant
from tests.fuzz.test_fuzz_ops import FUZZ, dec_e2m1, dec_e4m3, dec_ue8m0, e4m3_grid, run, unpack_nibbles

E2M1_GRID = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=torch.float64)
XDTYPES = [torch.float32, torch.bfloat16, torch.float16]


def grid_index(v: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
    """Index of the grid value nearest to ``|v|`` (grid ascending, non-negative; index parity is
    the code's last mantissa bit), ties to the even index (RNE); beyond the top: the top."""
    a = v.abs().clamp(max=float(grid[-1]))
    hi = torch.searchsorted(grid, a).clamp(max=len(grid) - 1)
    lo = (hi - 1).clamp(min=0)
    dlo, dhi = a - grid[lo], grid[hi] - a
    return torch.where(dlo < dhi, lo, torch.where(dhi < dlo, hi, torch.where(lo % 2 == 0, lo, hi)))


def f32(t: torch.Tensor) -> torch.Tensor:
    """fp64 -> the nearest fp32 (RNE; ties and overflow as IEEE), back in fp64."""
    return t.float().double()


def inject(x: torch.Tensor, groups: int, bs: int, kinds: list[str], gen) -> list[tuple[int, int, str]]:
    """Put one NaN / +inf / -inf into a random group per entry of ``kinds`` (x is [rows, groups * bs],
    changed in place); returns (row, group, kind) of each."""
    rows = x.shape[0]
    where = []
    for kind in kinds:
        r, g = int(torch.randint(rows, (1,), generator=gen)), int(torch.randint(groups, (1,), generator=gen))
        j = g * bs + int(torch.randint(bs, (1,), generator=gen))
        x[r, j] = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}[kind]
        where.append((r, g, kind))
    return where


NONFINITE = st.lists(st.sampled_from(["nan", "inf", "-inf"]), max_size=2)


# ----------------------------------------------------------------------------- act_quant, UE8M0
@FUZZ
@given(rows=st.integers(1, 5), groups=st.integers(1, 3), bs=st.sampled_from([32, 64, 128]),
       xdt=st.sampled_from(XDTYPES), e=st.integers(-30, 10), e8m0=st.booleans(), bad=NONFINITE,
       seed=st.integers(0, 2**31 - 1))
def test_act_quant_ue8m0_bit_exact(backend, poison_empty, rows, groups, bs, xdt, e, e8m0, bad, seed):
    """amax' = max(amax, fp32(1e-4)); s = 2^ceil(log2(fp32(amax' * fp32(1/448)))) (so x / s is
    exact); y = E4M3_RNE(clamp(x / s, +-448)). Bit-exact, scales in fp32 or as UE8M0 bytes. A group
    holding a NaN / inf: NaN scale (UE8M0 0xFF) and NaN values; the other groups unaffected."""
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(rows, groups * bs, generator=gen).double() * 2.0**e).to(xdt)  # 2^-30: under the floor
    x[0, 0] = 0.0
    where = inject(x, groups, bs, bad, gen)
    y, s = run(backend, act_quant, x.to(backend.device), bs, "ue8m0",
               torch.float8_e8m0fnu if e8m0 else torch.float32)
    assert s.dtype == (torch.float8_e8m0fnu if e8m0 else torch.float32) and s.shape == (rows, groups)
    xg = x.double().view(rows, groups, bs)
    amax = xg.abs().amax(-1).clamp(min=f32(torch.tensor(1e-4, dtype=torch.float64)).item())
    prod = f32(amax * f32(torch.tensor(1 / 448, dtype=torch.float64)))
    m, ex = torch.frexp(prod)  # prod = m 2^ex, m in [0.5, 1): ceil(log2) is ex - 1 at m = 0.5, else ex
    s64 = torch.pow(2.0, torch.where(m == 0.5, ex - 1, ex).double())
    bad_g = ~xg.isfinite().all(-1)
    s64 = torch.where(bad_g, torch.full_like(s64, float("nan")), s64)
    got_s = dec_ue8m0(s) if e8m0 else s.cpu().double()
    assert torch.equal(got_s.isnan(), bad_g) and torch.equal(got_s[~bad_g], s64[~bad_g]), "scales"
    q = (xg / s64[..., None]).clamp(-448, 448)
    grid = e4m3_grid()
    expect = (torch.sign(q) * grid[grid_index(q, grid)]).view(rows, groups * bs)
    got = dec_e4m3(y).view(rows, groups, bs)
    assert got[bad_g].isnan().all(), f"non-finite groups {where}: values not NaN"
    ok = ~bad_g[..., None].expand_as(got)
    diff = (got[ok] != expect.view(rows, groups, bs)[ok]).sum().item()
    assert diff == 0, f"{diff} codes differ"


# ------------------------------------------------------------------------- fp4_act_quant, E4M3
@FUZZ
@given(rows=st.integers(1, 4), groups=st.integers(1, 4), bs=st.sampled_from([16, 16, 32]),
       xdt=st.sampled_from(XDTYPES), e=st.one_of(st.integers(-16, 10), st.sampled_from([-40, -24, -14])),
       zero_group=st.booleans(), bad=NONFINITE, seed=st.integers(0, 2**31 - 1))
def test_fp4_act_quant_e4m3_exact(backend, poison_empty, rows, groups, bs, xdt, e, zero_group, bad, seed):
    """t = fp32(amax / 6) clamped to [2^-9, 448]; s = E4M3_RNE(t); codes E2M1_RNE(clamp(fp32(x / s),
    +-6)) with the sign bit set where fp32(x / s) < 0 (a small negative that rounds to zero is
    0x8); element 2i in the low nibble. The floor 2^-9 keeps an all-zero group at codes 0 (0 / s).
    A group holding a NaN: scale NaN (E4M3 0x7F / 0xFF), codes 0; an inf without NaN: t is inf,
    so s = 448 and the inf's code is +-6. Codes and scale bytes bit-exact."""
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(rows, groups * bs, generator=gen).double() * 2.0**e).to(xdt)
    if zero_group:
        x[-1, :bs] = 0.0
    where = inject(x, groups, bs, bad, gen)
    packed, s = run(backend, fp4_act_quant, x.to(backend.device), bs, "e4m3")
    assert s.dtype == torch.float8_e4m3fn and s.shape == (rows, groups) and packed.shape == (rows, groups * bs // 2)
    xg = x.double().view(rows, groups, bs)
    nan_g = xg.isnan().any(-1)
    t = f32(xg.abs().amax(-1) / 6).clamp(2.0**-9, 448)  # NaN amax stays NaN through clamp
    grid = e4m3_grid()
    s64 = grid[grid_index(t.nan_to_num(0.0), grid)]
    got_s = dec_e4m3(s)
    assert torch.equal(got_s.isnan(), nan_g), f"NaN scales where {where}"
    assert torch.equal(got_s[~nan_g], s64[~nan_g]), "scales"
    v = f32(xg / s64[..., None])  # IEEE fp32 division (x and s are fp32 values)
    mag = grid_index(v.clamp(-6, 6), E2M1_GRID)
    code = mag | ((v < 0).to(torch.int64) << 3)
    code = torch.where(nan_g[..., None], torch.zeros_like(code), code).view(rows, groups * bs)
    got = unpack_nibbles(packed)
    diff = (got != code).sum().item()
    assert diff == 0, f"{diff} codes differ (first at {(got != code).nonzero()[0].tolist()}), non-finite {where}"


@FUZZ
@given(fmt=st.sampled_from(["ue8m0", "e4m3"]), rows=st.integers(1, 3), groups=st.integers(2, 4),
       kinds=st.lists(st.sampled_from(["nan", "inf", "-inf"]), min_size=1, max_size=3), seed=st.integers(0, 2**31 - 1))
def test_fp4_act_quant_nonfinite_groups_are_contained(backend, poison_empty, fmt, rows, groups, kinds, seed):
    """Both scale formats: a group holding a NaN (or, UE8M0, an inf) gets a NaN scale and codes 0;
    E4M3 groups holding an inf but no NaN are quantized with s = 448. Every other group's codes and
    scale equal those of the same rows quantized with the non-finite groups zeroed (groups are
    independent)."""
    bs = 32 if fmt == "ue8m0" else 16
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, groups * bs, generator=gen) * 3
    clean = x.clone()
    inject(x, groups, bs, kinds, gen)
    xg = x.view(rows, groups, bs)
    bad = ~xg.isfinite().all(-1)
    nan_scale = xg.isnan().any(-1) | (bad if fmt == "ue8m0" else torch.zeros_like(bad))
    clean.view(rows, groups, bs)[bad] = 0.0
    p, s = run(backend, fp4_act_quant, x.to(backend.device), bs, fmt)
    p0, s0 = run(backend, fp4_act_quant, clean.to(backend.device), bs, fmt)
    dec = dec_ue8m0 if fmt == "ue8m0" else dec_e4m3
    sv, sv0 = dec(s), dec(s0)
    assert torch.equal(sv.isnan(), nan_scale)
    codes, codes0 = unpack_nibbles(p).view(rows, groups, bs), unpack_nibbles(p0).view(rows, groups, bs)
    assert (codes[nan_scale] == 0).all()
    assert torch.equal(codes[~bad], codes0[~bad]) and torch.equal(sv[~bad], sv0[~bad])
    if fmt == "e4m3":
        infs = bad & ~nan_scale
        assert (sv[infs] == 448).all()
        vals = dec_e2m1(codes[infs])
        assert torch.equal(vals[xg[infs].isinf()], torch.sign(xg[infs][xg[infs].isinf()]).double() * 6)


# -------------------------------------------------------------------------------- weight_dequant
@FUZZ
@given(n=st.integers(1, 70), k=st.integers(1, 70), bs=st.sampled_from([16, 32, 64, 128]), e8m0=st.booleans(),
       spread=st.sampled_from([0, 20, 60, 124]), bad=st.lists(st.sampled_from(["code", "nan_s", "inf_s"]), max_size=2),
       seed=st.integers(0, 2**31 - 1))
def test_weight_dequant(backend, poison_empty, n, k, bs, e8m0, spread, bad, seed):
    """out[n, k] = bf16(fp32(e4m3(w[n, k]) * s[n // bs, k // bs])): the fp32 product of an E4M3 value
    and an fp32 scale is one rounding of the exact product (computed in fp64, exact: 4 + 24
    significant bits); the cast to bf16 is within one bf16 spacing of it (RNE on the GPU and the
    reference, truncation in Triton 3.6's interpreter): |out - p32| <= 2^-7 |p32| + 2^-133 (the bf16
    subnormal spacing; subnormal results unchecked on the interpreter, whose cast mishandles them).
    Past bf16's range: +-inf, or the largest bf16 (truncation). Non-finite: NaN
    codes and NaN scales give NaN, an inf scale +-inf (NaN on zero codes), as IEEE products."""
    gen = torch.Generator().manual_seed(seed)
    nb, kb = -(-n // bs), -(-k // bs)
    codes = torch.randint(0, 254, (n, k), generator=gen)
    codes = torch.where(codes >= 0x7F, codes + 1, codes).to(torch.uint8)  # finite codes only (no 0x7F / 0xFF)
    if e8m0:
        lo, hi = max(0, 127 - spread - 2), min(254, 127 + spread + 2)
        sb = torch.randint(lo, hi + 1, (nb, kb), generator=gen).to(torch.uint8)
    else:
        ex = torch.randint(-spread - 2, spread + 3, (nb, kb), generator=gen).clamp(-126, 126)
        sf = (torch.rand(nb, kb, generator=gen) + 0.5) * torch.pow(2.0, ex.float())  # normal fp32, to 1.5 2^126
    for kind in bad:
        i, j = int(torch.randint(nb, (1,), generator=gen)), int(torch.randint(kb, (1,), generator=gen))
        if kind == "code":
            if backend.name == "interpret":
                continue  # Triton 3.6's interpreter decodes the E4M3 NaN codes as +-480 (the GPU: NaN)
            codes[min(n - 1, i * bs), min(k - 1, j * bs)] = 0x7F
        elif e8m0:
            sb[i, j] = 0xFF  # UE8M0 has no inf: its one non-finite byte is NaN
        else:
            sf[i, j] = float("nan") if kind == "nan_s" else float("inf")
    w = codes.view(torch.float8_e4m3fn)
    s = sb.view(torch.float8_e8m0fnu) if e8m0 else sf
    w_before, s_before = w.clone(), s.clone()
    out = run(backend, weight_dequant, w.to(backend.device), s.to(backend.device), bs)
    assert out.dtype == torch.bfloat16 and out.shape == (n, k)
    assert torch.equal(w.view(torch.uint8), w_before.view(torch.uint8))
    assert torch.equal(s.view(torch.uint8), s_before.view(torch.uint8))
    s64 = dec_ue8m0(sb) if e8m0 else sf.double()
    p = dec_e4m3(w) * s64.repeat_interleave(bs, 0).repeat_interleave(bs, 1)[:n, :k]
    p32 = f32(p)
    got = out.cpu().double()
    assert torch.equal(got.isnan(), p32.isnan()), "NaN where the product is NaN, nowhere else"
    top = float(torch.finfo(torch.bfloat16).max)
    inf = p32.isinf()
    assert torch.equal(got[inf], p32[inf]), "an infinite product is that inf"
    big = ~inf & (p32.abs() > top)  # finite in fp32, past bf16: inf (RNE) or the largest bf16 (truncation)
    assert ((got[big].abs() == top) | got[big].isinf()).all() and torch.equal(got[big].sign(), p32[big].sign())
    big |= inf
    fin = ~p32.isnan() & ~big
    if backend.name == "interpret":
        # Triton 3.6's interpreter casts fp32 subnormals to bf16 wrongly (2^-127 -> 0, 5e-39 ->
        # 8.2e-39); the reference and GPU tiers check that range
        fin &= p32.abs() >= 2.0**-126
    err = (got[fin] - p32[fin]).abs()
    bound = 2.0**-7 * p32[fin].abs() + 2.0**-133
    assert (err <= bound).all(), f"error x{(err / bound).max().item():.3g} over one bf16 spacing"
