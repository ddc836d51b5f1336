"""Property-based tests of the public ops against independent fp64 oracles (issue #49, item 10).

Every oracle here is written from the documented math and the formats' bit layouts, not from the
ops' ``reference.py`` nor from ``lowbit.formats``' ``dequantize``: E4M3 / E2M1 / UE8M0 bytes are
decoded with integer arithmetic, INTx codes are unpacked from the plane-split bytes with shifts
and the zero point, and the sums run in fp64. Each test runs on the reference and interpreter
tiers (the ``backend`` fixture; the cuda tier on a GPU) with NaN-poisoned output buffers.

Hypothesis draws shapes (M = 1, odd T, K not a power of two, partial last blocks), dtypes and
magnitudes; the tensors themselves come from a seeded generator (cheap to draw, still shrinkable
through the seed). Tolerances are derived in comments next to each check. Notation: u_f32 =
2^-24; an "ulp" bound of a cast to bf16 / fp16 is 2^-7 / 2^-10 relative, a whole ulp rather than
half because Triton 3.6's interpreter converts fp32 -> bf16 by truncation (found by this suite:
the GPU rounds to nearest).
"""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lowbit
from lowbit.formats import FP8, INTx, MXFP4, NVFP4
from lowbit.ops import (act_quant, fp4_act_quant, fp4_gemm, fp8_gemm, gathered_bias, gathered_dot, gathered_rows,
                        hc_split_sinkhorn, sparse_attn)

U32 = 2.0**-24
ULP = {torch.float32: 2.0**-23, torch.bfloat16: 2.0**-7, torch.float16: 2.0**-10}
FUZZ = settings(max_examples=12, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


# ------------------------------------------------------------------------------ independent decoders
def dec_e4m3(t: torch.Tensor) -> torch.Tensor:
    """E4M3 (fn) bytes -> fp64: s eeee mmm, bias 7, subnormals at e = 0, S.1111.111 NaN."""
    b = t.view(torch.uint8).to(torch.int64).cpu()
    s, e, m = (b >> 7) & 1, (b >> 3) & 15, b & 7
    mag = torch.where(e == 0, m.double() / 8 * 2.0**-6, (1 + m.double() / 8) * torch.pow(2.0, (e - 7).double()))
    out = torch.where(s == 1, -mag, mag)
    return torch.where((b & 0x7F) == 0x7F, torch.full_like(out, float("nan")), out)


def dec_e2m1(nib: torch.Tensor) -> torch.Tensor:
    """E2M1 nibbles (int64 0..15) -> fp64: s ee m, bias 1, e = 0 subnormal (0 or 0.5)."""
    s, e, m = (nib >> 3) & 1, (nib >> 1) & 3, nib & 1
    mag = torch.where(e == 0, m.double() * 0.5, (1 + m.double() / 2) * torch.pow(2.0, (e - 1).double()))
    return torch.where(s == 1, -mag, mag)


def unpack_nibbles(packed: torch.Tensor) -> torch.Tensor:
    """uint8 [..., K/2] -> int64 nibbles [..., K], element 2i in the LOW nibble of byte i."""
    b = packed.view(torch.uint8).to(torch.int64).cpu()
    return torch.stack([b & 15, b >> 4], dim=-1).flatten(-2)


def dec_ue8m0(t: torch.Tensor) -> torch.Tensor:
    b = t.view(torch.uint8).to(torch.int64).cpu()
    return torch.where(b == 255, torch.full(b.shape, float("nan"), dtype=torch.float64),
                       torch.pow(2.0, (b - 127).double()))


def dec_weight(w) -> torch.Tensor:
    """fp64 [V, K] rows of any gathered weight, from its stored bytes."""
    if isinstance(w, torch.Tensor):
        return w.detach().cpu().double()
    if isinstance(w, FP8):
        return dec_e4m3(w.data) * w.scale.detach().cpu().double().reshape(-1, 1)
    if isinstance(w, NVFP4):
        v = dec_e2m1(unpack_nibbles(w.packed))
        s = dec_e4m3(w.scale).repeat_interleave(16, dim=1) * float(w.global_scale)
        return v * s
    if isinstance(w, MXFP4):
        return dec_e2m1(unpack_nibbles(w.packed)) * dec_ue8m0(w.scale).repeat_interleave(32, dim=1)
    if isinstance(w, INTx):
        p = w.packed.to(torch.int64).cpu()
        planes, mask = 8 // w.bits, (1 << w.bits) - 1
        codes = torch.cat([(p >> (i * w.bits)) & mask for i in range(planes)], dim=1)  # plane i: k = i*L + j
        z = w.zero.to(torch.int64).cpu().repeat_interleave(w.group_size, dim=1)
        s = w.scale.cpu().double().repeat_interleave(w.group_size, dim=1)
        return ((codes - z).double() * s)[:, : w.k]
    raise AssertionError(type(w))


def within(out, expect, bound, what):
    out64 = out.detach().cpu().double()
    assert out64.shape == expect.shape, (what, out64.shape, expect.shape)
    assert not out64.isnan().any(), f"{what}: NaN (an unwritten element of a poisoned buffer?)"
    err = (out64 - expect).abs()
    worst = (err / bound).max().item() if err.numel() else 0.0
    assert (err <= bound).all(), f"{what}: error x{worst:.3g} over the derived bound"


def run(backend, fn, *args, **kwargs):
    with backend.active():
        return fn(*args, **kwargs)


# --------------------------------------------------------------------------------------- gathered
def make_weight(kind, v, k, gen, mag):
    w = torch.randn(v, k, generator=gen) * mag
    if kind in ("fp32", "bf16", "fp16"):
        return w.to({"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[kind])
    if kind == "fp8":
        return FP8.quantize(w, "row")
    if kind == "nvfp4":
        return NVFP4.quantize(w)
    if kind == "mxfp4":
        return MXFP4.quantize(w)
    bits = int(kind[4:])
    return INTx.quantize(w, bits=bits, group_size=16)


KINDS = ["fp32", "bf16", "fp16", "fp8", "nvfp4", "mxfp4", "intx2", "intx4", "intx8"]


@st.composite
def gathered_case(draw):
    kind = draw(st.sampled_from(KINDS))
    # K odd / not a power of two where the format allows (dense, FP8 rows); INTx: whole groups of
    # 16 but K not a multiple of the plane unit (8/bits x 16: padded K); FP4: groups of 32
    unit = {"nvfp4": 32, "mxfp4": 32, "intx2": 16, "intx4": 16, "intx8": 16}.get(kind, 1)
    k = unit * draw(st.integers(1, 5)) if unit > 1 else draw(st.integers(1, 150))
    return dict(kind=kind, k=k, v=draw(st.integers(1, 40)), b=draw(st.integers(1, 4)), t=draw(st.integers(1, 9)),
                xdt=draw(st.sampled_from([torch.float32, torch.bfloat16, torch.float16])),
                mag=10.0 ** draw(st.integers(-3, 3)), seed=draw(st.integers(0, 2**31 - 1)))


def dot_bound(x64, w64, idx, k):
    """fp32 products and fp32 accumulation of K terms (any order): |err| <= gamma_K sum |x w| with
    gamma_K = K u / (1 - K u); decoding a row in fp32 costs <= 3 more roundings per term (NVFP4:
    e4m3 scale x global scale, x value; x converted to fp32 is exact). (K + 4) u_f32 (1.01)
    covers both (K <= 150 here)."""
    mag = torch.einsum("bk,btk->bt", x64.abs(), w64[idx].abs())
    return (k + 4) * U32 * 1.01 * mag + 1e-300


@FUZZ
@given(case=gathered_case())
def test_gathered_dot_and_rows(backend, poison_empty, case):
    gen = torch.Generator().manual_seed(case["seed"])
    w = make_weight(case["kind"], case["v"], case["k"], gen, case["mag"])
    w64 = dec_weight(w)
    x = (torch.randn(case["b"], case["k"], generator=gen) * 3).to(case["xdt"])
    idx = torch.randint(0, case["v"], (case["b"], case["t"]), generator=gen)
    dev = backend.device
    wd = w.to(dev) if isinstance(w, torch.Tensor) else type(w)(**{f: (getattr(w, f).to(dev) if isinstance(
        getattr(w, f), torch.Tensor) else getattr(w, f)) for f in w.__dataclass_fields__})
    out = run(backend, gathered_dot, x.to(dev), wd, idx.to(dev))
    x64 = x.double()
    expect = torch.einsum("bk,btk->bt", x64, w64[idx])
    within(out, expect, dot_bound(x64, w64, idx, case["k"]), "gathered_dot")
    for dt in (torch.float32, torch.bfloat16):
        rows = run(backend, gathered_rows, wd, idx.to(dev), dt)
        # fp32 decode (<= 2 roundings, NVFP4) then one cast to dt: <= (ulp(dt) + 3 u_f32) |w|
        within(rows, w64[idx], (ULP[dt] + 3 * U32) * w64[idx].abs() + 1e-300, f"gathered_rows {dt}")


@FUZZ
@given(case=gathered_case(), alpha=st.sampled_from([1.0, -0.5, 3.0]),
       ldt=st.sampled_from([torch.float32, torch.bfloat16, torch.float16]))
def test_gathered_bias(backend, poison_empty, case, alpha, ldt):
    gen = torch.Generator().manual_seed(case["seed"])
    w = make_weight(case["kind"], case["v"], case["k"], gen, case["mag"])
    w64 = dec_weight(w)
    b, t, v = case["b"], min(case["t"], case["v"]), case["v"]
    x = (torch.randn(b, case["k"], generator=gen) * 3).to(case["xdt"])
    idx = torch.stack([torch.randperm(v, generator=gen)[:t] for _ in range(b)])  # distinct per row
    values = torch.randn(b, t, generator=gen).to(case["xdt"])
    logits = torch.randn(b, v, generator=gen).to(ldt)
    before = logits.clone()
    dev = backend.device
    wd = w.to(dev) if isinstance(w, torch.Tensor) else type(w)(**{f: (getattr(w, f).to(dev) if isinstance(
        getattr(w, f), torch.Tensor) else getattr(w, f)) for f in w.__dataclass_fields__})
    lg = logits.to(dev)
    ret = run(backend, gathered_bias, x.to(dev), wd, values.to(dev), idx.to(dev), lg, alpha)
    assert ret is lg
    x64 = x.double()
    dot = torch.einsum("bk,btk->bt", x64, w64[idx])
    new = values.double() + alpha * dot
    expect = before.double().clone()
    expect.scatter_(1, idx, new)
    # fp32: the dot's bound times |alpha|, then values + alpha*dot (2 roundings, 2 u_f32 |new| +
    # ...), then one cast to logits.dtype (<= 1 ulp relative)
    dbound = abs(alpha) * dot_bound(x64, w64, idx, case["k"])
    nbound = (ULP[ldt] + 3 * U32) * (new.abs() + dbound) + dbound
    bound = torch.zeros_like(expect)
    bound.scatter_(1, idx, nbound)
    # A result past logits.dtype's range is +-inf (the IEEE cast; fp16 at magnitude 1e3 x 3),
    # on every backend: where the exact value plus its bound reaches the top of the range, an
    # inf of the right sign is also correct.
    top = torch.zeros_like(expect, dtype=torch.bool)
    top.scatter_(1, idx, (new.abs() + nbound) >= torch.finfo(ldt).max)
    got = lg.detach().cpu().double()
    inf_ok = top & got.isinf() & (torch.sign(got) == torch.sign(expect))
    got = torch.where(inf_ok, expect, got)
    within(got, expect, bound + 1e-300, "gathered_bias")  # untouched entries: bound 0, exact


# ------------------------------------------------------------------------------------------ GEMMs
def random_e4m3(shape, gen, device):
    """Random finite E4M3 bytes (every finite code, NaN codes 0x7F / 0xFF excluded)."""
    b = torch.randint(0, 254, shape, generator=gen)
    b = torch.where(b >= 0x7F, b + 1, b)  # skip 0x7F; 254 -> 255 never drawn (b < 254 -> <= 254)
    return b.to(torch.uint8).view(torch.float8_e4m3fn).to(device)


@st.composite
def gemm_case(draw):
    return dict(lead=draw(st.sampled_from([(1,), (3,), (5,), (2, 3), (0,)])), n=draw(st.integers(1, 200)),
                kb=draw(st.integers(1, 3)), e8m0=draw(st.booleans()), seed=draw(st.integers(0, 2**31 - 1)))


#: sm_90's FP8 tensor cores (wgmma / QGMMA, what ``tl.dot`` on FP8 lowers to) do not add in fp32:
#: their accumulator keeps 13 fraction bits (e8m13; DeepSeek-V3's report measures "around 14 bits"
#: retained). Modelled per 32-wide k step of a dot: the 32 products and the running sum are aligned
#: to the largest of them and cut to 13 fraction bits (each loses < 2^-13 of that largest addend,
#: <= the block's sum|.|), then the result is cut to 13 fraction bits: <= 34 x 2^-13 sum|.| a step.
#: Measured on an H100 (torch 2.11, Triton 3.6): up to 10.5 x 2^-13 sum|.| over a 128-wide block
#: whose first 32 products cancel against the other 96 (cuts in one direction add up).
U_MMA_FP8 = 2.0**-13
MMA_STEP_ERR = 34 * U_MMA_FP8


def gemm_bound(terms_abs, k, mma=False):
    """Per 128-wide block: an fp32 dot of 128 exact products (e4m3 x e4m3 / e2m1 fits fp32), then x
    a_s x b_s (2 roundings), accumulated over K/128 blocks in fp32: (128 + K/128 + 3) u_f32 sum|.|
    With ``mma`` (the FP8 tensor cores of a GPU) a block's dot is 4 steps of 32 products instead,
    each off by <= ``MMA_STEP_ERR`` of the block's sum|.|: 4 x that over all blocks. Then one cast
    to bf16: <= 1 ulp (2^-7) of the result, i.e. of |C| + that error."""
    acc = ((128 + k // 128 + 3) * U32 + (4 * MMA_STEP_ERR if mma else 0.0)) * 1.01 * terms_abs
    return acc, lambda c64: ULP[torch.bfloat16] * (c64.abs() + acc) + acc + 1e-300


@FUZZ
@given(case=gemm_case())
def test_fp8_gemm(backend, poison_empty, case):
    gen = torch.Generator().manual_seed(case["seed"])
    dev, lead, n, k = backend.device, case["lead"], case["n"], 128 * case["kb"]
    a = random_e4m3((*lead, k), gen, dev)
    b = random_e4m3((n, k), gen, dev)
    # scales keep |C| far from fp32 / bf16 overflow (e4m3 max 448: 448^2 * K * 2^-10 ~ 1e5)
    if case["e8m0"]:
        a_s = torch.randint(117, 127, (*lead, k // 128), generator=gen).to(torch.uint8).view(torch.float8_e8m0fnu)
        b_s = torch.randint(117, 127, (-(-n // 128), k // 128), generator=gen).to(torch.uint8).view(torch.float8_e8m0fnu)
        as64, bs64 = dec_ue8m0(a_s), dec_ue8m0(b_s)
    else:
        a_s = torch.rand(*lead, k // 128, generator=gen) * 2.0**-5 + 2.0**-12
        b_s = torch.rand(-(-n // 128), k // 128, generator=gen) * 2.0**-5 + 2.0**-12
        as64, bs64 = a_s.double(), b_s.double()
    out = run(backend, fp8_gemm, a, a_s.to(dev), b, b_s.to(dev))
    a64 = dec_e4m3(a) * as64.repeat_interleave(128, dim=-1)
    b64 = dec_e4m3(b) * bs64.repeat_interleave(128, dim=0)[:n].repeat_interleave(128, dim=1)
    c64 = a64 @ b64.T
    acc, bound = gemm_bound(a64.abs() @ b64.abs().T, k, mma=backend.name == "cuda")
    within(out, c64, bound(c64), "fp8_gemm")


@settings(FUZZ, max_examples=6)  # the interpreter's FP4 kernel is the slowest launch here
@given(case=gemm_case())
def test_fp4_gemm(backend, poison_empty, case):
    gen = torch.Generator().manual_seed(case["seed"])
    dev, lead, n, k = backend.device, case["lead"], case["n"], 128 * case["kb"]
    a = random_e4m3((*lead, k), gen, dev)
    b = torch.randint(0, 256, (n, k // 2), generator=gen).to(torch.uint8)  # every byte is two E2M1 codes
    b_s = torch.randint(117, 131, (n, k // 32), generator=gen).to(torch.uint8)
    a_s = torch.rand(*lead, k // 128, generator=gen) * 2.0**-5 + 2.0**-12
    out = run(backend, fp4_gemm, a, a_s.to(dev), b.to(dev), b_s.to(dev))
    a64 = dec_e4m3(a) * a_s.double().repeat_interleave(128, dim=-1)
    b64 = dec_e2m1(unpack_nibbles(b)) * dec_ue8m0(b_s).repeat_interleave(32, dim=1)
    c64 = a64 @ b64.T
    # per 32-block partial sums (fp32) scaled by 2^e (exact) then a_s: same bound as fp8_gemm
    acc, bound = gemm_bound(a64.abs() @ b64.abs().T, k * 4, mma=backend.name == "cuda")
    within(out, c64, bound(c64), "fp4_gemm")


# ------------------------------------------------------------------------------------- act_quant
def e4m3_grid() -> torch.Tensor:
    """All finite non-negative E4M3 values, ascending (decoded from their bytes)."""
    return dec_e4m3(torch.arange(0, 0x7F, dtype=torch.uint8)).sort().values


def round_to_grid(v: torch.Tensor, grid: torch.Tensor, even: torch.Tensor) -> torch.Tensor:
    """Round |v| to the nearest grid value, ties to the entry with an even code (RNE), keep the
    sign; beyond the grid's top: saturate (the callers clamp first)."""
    a = v.abs().clamp(max=float(grid[-1]))
    hi = torch.searchsorted(grid, a).clamp(max=len(grid) - 1)
    lo = (hi - 1).clamp(min=0)
    dlo, dhi = a - grid[lo], grid[hi] - a
    pick = torch.where(dlo < dhi, lo, torch.where(dhi < dlo, hi, torch.where(even[lo], lo, hi)))
    return torch.sign(v) * grid[pick]


@FUZZ
@given(rows=st.integers(1, 5), groups=st.integers(1, 3), bs=st.sampled_from([32, 64, 128]),
       xdt=st.sampled_from([torch.float32, torch.bfloat16, torch.float16]), e=st.integers(-24, 6),
       zero_group=st.booleans(), seed=st.integers(0, 2**31 - 1))
def test_act_quant_bit_exact(backend, poison_empty, rows, groups, bs, xdt, e, zero_group, seed):
    """s = fp32(max(amax, 1e-4) / 448), y = e4m3_RNE(clamp(fp32(x / s), +-448)): bit-exact. The
    fp32 divisions are recomputed in fp64 and rounded to fp32 (a double rounding that is
    innocuous for one division of fp32 operands: 53 >= 2 * 24 + 2)."""
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(rows, groups * bs, generator=gen) * 2.0**e).to(xdt)  # 2^-24: under the 1e-4 floor
    x[0, 0] = 0.0
    if zero_group:
        x[-1, :bs] = 0.0
    y, s = run(backend, act_quant, x.to(backend.device), bs)
    xg = x.double().view(rows, groups, bs)
    amax = xg.abs().amax(-1).clamp(min=float(torch.tensor(1e-4, dtype=torch.float32)))
    s64 = (amax / 448).float().double()
    assert torch.equal(s.cpu().double(), s64), "scales"
    q = (xg / s64[..., None]).float().double().clamp(-448, 448)
    grid = e4m3_grid()
    even = (torch.arange(len(grid)) % 2 == 0)  # grid index parity = mantissa parity (codes 0..126)
    expect = round_to_grid(q, grid, even).view(rows, groups * bs)
    got = dec_e4m3(y)
    assert torch.equal(got, expect), f"{(got != expect).sum().item()} codes differ"


@FUZZ
@given(rows=st.integers(1, 4), groups=st.integers(1, 4),
       xdt=st.sampled_from([torch.float32, torch.bfloat16]),
       e=st.one_of(st.integers(-20, 8), st.sampled_from([-149, -140, -130, -126, -120])),  # subnormals, the floor
       zero_group=st.booleans(), seed=st.integers(0, 2**31 - 1))
def test_fp4_act_quant_ue8m0_exact(backend, poison_empty, rows, groups, xdt, e, zero_group, seed):
    """MX rule: amax' = max(amax, 6 * 2^-126), s = 2^ceil(log2(fp32(amax' * fp32(1/6)))), codes
    E2M1_RNE(clamp(fp32(x / s), +-6)) (x / s is exact: s is a power of two). Decoded values exact."""
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(rows, groups * 32, generator=gen).double() * 2.0**e).to(xdt)
    if zero_group:
        x[-1, :32] = 0.0
    packed, s = run(backend, fp4_act_quant, x.to(backend.device), 32, "ue8m0")
    xg = x.double().view(rows, groups, 32)
    amax = xg.abs().amax(-1).clamp(min=6 * 2.0**-126)
    prod = (amax.float() * torch.tensor(1 / 6, dtype=torch.float32)).double()  # fp32 product, exact in fp64
    m, ex = torch.frexp(prod)  # prod = m * 2^ex, m in [0.5, 1)
    exp = torch.where(m == 0.5, ex - 1, ex)  # ceil(log2(prod))
    s64 = torch.pow(2.0, exp.double())
    assert torch.equal(dec_ue8m0(s), s64), "scales"
    grid = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=torch.float64)
    even = torch.arange(8) % 2 == 0
    expect = round_to_grid((xg / s64[..., None]).clamp(-6, 6), grid, even).view(rows, groups * 32)
    got = dec_e2m1(unpack_nibbles(packed))
    assert torch.equal(got, expect), f"{(got != expect).sum().item()} codes differ"


# ------------------------------------------------------------------------------------ sparse_attn
def attn_oracle(q, kv, sink, idx, scale):
    """fp64, per query: w_j = e^{s_j} / (sum_j e^{s_j} + e^{sink}) over the valid listed rows (each
    occurrence), o = sum w_j kv_j; also A = sum w_j |kv_j| and S = max scale * sum |q||k|. No valid
    row: 0; +inf sink: 0; NaN sink: NaN where a row is valid."""
    b, m, h, d = q.shape
    n = kv.shape[1]
    q64, kv64, sk64 = q.double(), kv.double(), sink.double()
    o = torch.zeros(b, m, h, d, dtype=torch.float64)
    amag = torch.zeros_like(o)
    smax = 0.0
    for ib in range(b):
        for im in range(m):
            js = [j for j in idx[ib, im].tolist() if 0 <= j < n]
            if not js:
                continue
            rows = kv64[ib, js]
            for ih in range(h):
                sc = scale * (rows @ q64[ib, im, ih])
                smax = max(smax, float((abs(scale) * (rows.abs() @ q64[ib, im, ih].abs())).max()))
                sk = float(sk64[ih])
                if math.isnan(sk):
                    o[ib, im, ih] = float("nan")
                    continue
                if sk == math.inf:
                    continue
                c = max(float(sc.max()), sk)
                ex = torch.exp(sc - c)
                w = ex / (ex.sum() + math.exp(sk - c))
                o[ib, im, ih] = w @ rows
                amag[ib, im, ih] = w @ rows.abs()
    return o, amag, smax


@FUZZ
@given(b=st.integers(1, 2), m=st.integers(1, 3), h=st.integers(1, 5), d=st.integers(1, 80), n=st.integers(1, 40),
       topk=st.integers(0, 40), qmag=st.sampled_from([0.1, 1.0, 4.0]),
       sink_kind=st.sampled_from(["finite", "finite", "-inf", "+inf", "nan"]), seed=st.integers(0, 2**31 - 1))
def test_sparse_attn(backend, poison_empty, b, m, h, d, n, topk, qmag, sink_kind, seed):
    """Bound (derived in tests/ops/test_sparse_attn.py): weights rounded to bf16 before the PV
    product and the output cast: 2 casts of <= 1 ulp (2^-7, truncating interpreter) each, on
    A = sum w |v|; fp32 scores move the weights by <= 2.5 d u_f32 S."""
    gen = torch.Generator().manual_seed(seed)
    q = (torch.randn(b, m, h, d, generator=gen) * qmag).to(torch.bfloat16)
    kv = torch.randn(b, n, d, generator=gen).to(torch.bfloat16)
    sink = torch.randn(h, generator=gen) * 2
    special = {"-inf": -math.inf, "+inf": math.inf, "nan": math.nan}.get(sink_kind)
    if special is not None:
        sink[0] = special
    idx = torch.randint(-2, n + 2, (b, m, topk), generator=gen, dtype=torch.int32)  # some out of range
    scale = d**-0.5
    dev = backend.device
    out = run(backend, sparse_attn, q.to(dev), kv.to(dev), sink.to(dev), idx.to(dev), scale)
    o, amag, smax = attn_oracle(q, kv, sink, idx, scale)
    bound = (2 * ULP[torch.bfloat16] + 2.5 * d * U32 * smax) * amag + 1e-30
    out64 = out.detach().cpu().double()
    assert torch.equal(out64.isnan(), o.isnan()), "NaN pattern"
    err = (out64 - o).abs().nan_to_num(0.0)
    assert (err <= bound).all(), f"error x{(err / bound).max().item():.3g} over the bound"


# ---------------------------------------------------------------------------------- hc_sinkhorn
def sinkhorn_oracle(mixes, hc_scale, hc_base, hc, iters, eps):
    x = mixes.double()
    sc, base = hc_scale.double(), hc_base.double()
    sig = lambda v: 1 / (1 + torch.exp(-v))  # noqa: E731
    pre = sig(x[..., :hc] * sc[0] + base[:hc]) + eps
    post = 2 * sig(x[..., hc:2 * hc] * sc[1] + base[hc:2 * hc])
    c = (x[..., 2 * hc:] * sc[2] + base[2 * hc:]).reshape(*x.shape[:-1], hc, hc)
    c = torch.exp(c - c.amax(-1, keepdim=True))
    c = c / c.sum(-1, keepdim=True) + eps
    c = c / (c.sum(-2, keepdim=True) + eps)
    for _ in range(iters - 1):
        c = c / (c.sum(-1, keepdim=True) + eps)
        c = c / (c.sum(-2, keepdim=True) + eps)
    return pre, post, c


@FUZZ
@given(b=st.integers(1, 2), s=st.integers(1, 5), hc=st.integers(1, 8), iters=st.integers(1, 8),
       mag=st.sampled_from([0.1, 1.0, 5.0]), seed=st.integers(0, 2**31 - 1))
def test_hc_split_sinkhorn(backend, poison_empty, b, s, hc, iters, mag, seed):
    """All fp32. pre / post: a sigmoid of one fused multiply-add, a few ulps: 16 u_f32 absolute
    (values <= 2). comb: entries in [0, 1 + eps]; each normalisation sums <= hc terms and divides
    (hc + 2 roundings, relative), the softmax adds ~hc + 4 more; errors in the normalised matrix
    do not grow through the alternating normalisations (each step divides out its own sums), so
    (2 iters + 2) (hc + 4) u_f32 absolute per entry, x2 margin for the fp32 exp (<= 2 ulps)."""
    gen = torch.Generator().manual_seed(seed)
    width = (2 + hc) * hc
    mixes = torch.randn(b, s, width, generator=gen) * mag
    hc_scale = torch.rand(3, generator=gen) + 0.5
    hc_base = torch.randn(width, generator=gen) * 0.5
    dev = backend.device
    pre, post, comb = run(backend, hc_split_sinkhorn, mixes.to(dev), hc_scale.to(dev), hc_base.to(dev), hc, iters, 1e-6)
    epre, epost, ecomb = sinkhorn_oracle(mixes, hc_scale, hc_base, hc, iters, 1e-6)
    within(pre, epre, torch.full_like(epre, 16 * U32), "pre")
    within(post, epost, torch.full_like(epost, 16 * U32), "post")
    within(comb, ecomb, torch.full_like(ecomb, 2 * (2 * iters + 2) * (hc + 4) * U32), "comb")
