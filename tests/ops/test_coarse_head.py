"""The coarse pass (lowbit.ops.coarse_head): kernel vs reference, and the bound's soundness."""
from __future__ import annotations

import pytest
import torch

import lowbit
from lowbit.formats import FP8, NVFP4
from lowbit.ops.coarse_head import BOUND_DET, BOUND_NONE, BOUND_STAT, coarse_head, pack
from lowbit.ops.coarse_head.reference import block_candidates_reference
from tests._helpers import rel_err

N, K = 333, 160  # N: last block partial (block 64); K: not a power of two
BLOCK, KCAND = 64, 3


def _weight(kind: str, n=N, k=K):
    w = torch.randn(n, k) * 0.02
    if kind == "fp8":
        return FP8.quantize(w, "row"), None
    if kind == "nvfp4":
        return NVFP4.quantize(w), None
    return w.to(torch.bfloat16), int(kind[3:])


def _exact64(x, weight):
    dense = weight if isinstance(weight, torch.Tensor) else weight.dequantize(torch.float32)
    return x.double().cpu() @ dense.double().cpu().t()


BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32
# Every format x bound, and each of the GEMV (m = 1) and tl.dot (m > 1) paths with every x dtype
# (fp32 x takes the hi + lo split on the GPU), in few enough cases for the interpreter.
CASES = [
    ("int2", BOUND_DET, 1, BF16), ("int2", BOUND_NONE, 5, FP32), ("int4", BOUND_NONE, 1, FP16),
    ("int4", BOUND_STAT, 5, BF16), ("int4", BOUND_DET, 3, FP16), ("int8", BOUND_DET, 5, BF16),
    ("int8", BOUND_NONE, 1, FP32), ("fp8", BOUND_DET, 1, BF16), ("fp8", BOUND_NONE, 5, FP32),
    ("nvfp4", BOUND_NONE, 1, FP32), ("nvfp4", BOUND_DET, 5, BF16), ("nvfp4", BOUND_DET, 3, FP16),
]


@pytest.mark.parametrize("kind,bound,m,xdtype", CASES)
def test_matches_reference(backend, kind, bound, m, xdtype):
    weight, bits = _weight(kind)
    x = torch.randn(m, K).to(xdtype)
    packing = pack(weight, bits, 32)  # one packing (quantized on the CPU) for both sides
    with lowbit.backend("reference"):
        ref = coarse_head(x, packing, block=BLOCK, kcand=KCAND, bound=bound, write_logits=True)
    xd = x.to(backend.device)
    with backend.active():
        out = coarse_head(xd, packing.to(backend.device), block=BLOCK, kcand=KCAND, bound=bound, write_logits=True)
    out = type(out)(*(t.cpu() for t in out))
    nb = -(-N // BLOCK)
    assert out.cand_key.shape == (m, nb * KCAND) and out.cand_idx.dtype == torch.int64
    # fp32 sums in a different order: |diff| <~ K * 2^-24 * sum|x w~| ~ 1e-5 relative. The GPU's
    # INT2/INT4 dot path multiplies codes q + 128 (bf16 decode without int->float converts) and
    # folds the 128 into the zero point: terms ~ (128 + qmax) / qmax larger, so up to ~1e-3.
    magic = backend.name == "cuda" and bits in (2, 4) and m > 1 and xdtype != FP16
    # fast mode at M = 1 takes the packed-half GEMV (fp16 products: see its own tests below)
    half = backend.is_triton and bound == BOUND_NONE and m == 1 and bits is not None
    assert rel_err(out.logits, ref.logits) < (3e-3 if half else 1e-3 if magic else 1e-5)
    assert not out.cand_key.isnan().any()
    if bound == BOUND_NONE:
        # the candidates are exactly the per-block top-kcand of the kernel's own logits
        mine = block_candidates_reference(out.logits, None, block=BLOCK, kcand=KCAND, write_logits=False)
        torch.testing.assert_close(out.cand_key, mine.cand_key, rtol=0, atol=0)
        assert torch.equal(out.cand_idx, mine.cand_idx)
        return
    if bits is not None:
        # the INTx bound (ub - lb) / 2 matches the reference's (their rounding slacks differ by
        # the summation depth: < 2% here). Native rows' bound is the rounding slack alone.
        b_out = (out.cand_key - out.cand_lb) / 2
        b_ref = (ref.cand_key - ref.cand_lb) / 2
        torch.testing.assert_close(b_out.sort(-1).values, b_ref.sort(-1).values, rtol=2e-2, atol=1e-6)
    exact = _exact64(x, weight)
    cand_exact = exact.gather(1, out.cand_idx)
    if bound == BOUND_DET:  # sound by construction: lb <= exact <= ub for every emitted token
        assert (out.cand_lb.double() <= cand_exact).all() and (cand_exact <= out.cand_key.double()).all()
        blocks = torch.nn.functional.pad(exact, (0, nb * BLOCK - N), value=float("-inf")).view(m, nb, BLOCK)
        assert (out.block_lb.double() <= blocks.amax(-1)).all()
        # the best unemitted upper bound is at least the best unemitted exact value
        kth = blocks.sort(-1, descending=True).values[..., KCAND]
        assert (out.block_rest.double() >= kth - 1e-6).all()


def test_planted_worst_case_is_covered(backend):
    """Weights exactly half a step from their code (|w - w~| = s/2) and x aligned with the
    error: the coarse error equals the deterministic bound, which must still cover it."""
    n, k, g = 96, 128, 32
    torch.manual_seed(1)
    levels = torch.randint(0, 4, (n, k)).float()
    # every w sits exactly half a step between two INT2 codes: s = 0.01, z = 2, w/s + z = 0.5 .. 3.5
    w = (levels - 1.5) * 0.01
    w[:, ::g] = -0.015  # pin each group's range to [-0.015, 0.015]
    w[:, 1::g] = 0.015
    packing = pack(w, 2, g)
    err = packing.fmt.dequantize() - w
    x = torch.sign(-err[:4]) * (torch.rand(4, k) + 0.5)  # row j: token j's error is maximal
    exact = x.double() @ w.double().t()
    with backend.active():
        out = coarse_head(x.to(backend.device), pack(w.to(backend.device), 2, g), block=32, kcand=32,
                          bound=BOUND_DET, write_logits=True)
    ub, lb, idx = out.cand_key.cpu().double(), out.cand_lb.cpu().double(), out.cand_idx.cpu()
    ex = exact.gather(1, idx)
    assert (lb <= ex).all() and (ex <= ub).all()
    # the bound is tight here: the coarse error reaches at least 90% of it on some token
    coarse = out.logits.cpu().double().gather(1, idx)
    assert ((ex - coarse).abs() / ((ub - lb) / 2)).max() > 0.9


@pytest.mark.parametrize("bad", ["k", "dtype", "block", "kcand", "stat_native", "empty"])
def test_validation(bad):
    w = torch.randn(64, 32)
    packing = pack(w, 4, 32)
    x = torch.randn(2, 32)
    kwargs = dict(block=32, kcand=2, bound=BOUND_NONE)
    if bad == "k":
        x = torch.randn(2, 48)
    elif bad == "dtype":
        x = x.to(torch.float64)
    elif bad == "block":
        kwargs["block"] = 48
    elif bad == "kcand":
        kwargs["kcand"] = 33
    elif bad == "stat_native":
        packing = pack(FP8.quantize(w, "row"), None, 32)
        kwargs["bound"] = BOUND_STAT
    elif bad == "empty":
        x = torch.randn(0, 32)
    with pytest.raises(ValueError):
        coarse_head(x, packing, **kwargs)


def test_pack_is_shared_and_weak():
    w = torch.randn(64, 32)
    a, b = pack(w, 4, 32), pack(w, 4, 32)
    assert a is b
    assert pack(w, 8, 32) is not a
    w.add_(1.0)  # in place: a new version, a new packing
    assert pack(w, 4, 32) is not a


@pytest.mark.cuda
def test_opcheck_cuda():
    from lowbit.ops.coarse_head import coarse, dispatch
    from lowbit.ops.coarse_head.packing import raw_tensors

    w = (torch.randn(300, 128, device="cuda") * 0.02).bfloat16()
    p = pack(w, 4, 64)
    x = torch.randn(3, 128, device="cuda", dtype=torch.bfloat16)
    t = raw_tensors(p)
    route = coarse._ROUTES.index("coarse_fp32")
    assert dispatch.coarse_route(coarse.call_of(p, x, BOUND_STAT, 64, False)) == "coarse_fp32"
    torch.library.opcheck(torch.ops.lowbit.coarse_head.default,
                          (x, *t, route, p.kind, 4, 64, 300, p.padded_k, 64, 3, BOUND_STAT, 4.0, True))


@pytest.mark.parametrize("kind", ["int2", "fp8", "nvfp4"])
def test_gemv_path_matches_dot_path(backend, kind):
    """The M = 1 GEMV variant (config BM = 1) against the tl.dot variant, same inputs."""
    if not backend.is_triton:
        pytest.skip("launch configurations exist on the Triton tiers only")
    from lowbit.ops.coarse_head.coarse_fp32 import Fp32Config

    weight, bits = _weight(kind)
    p = pack(weight.to(backend.device), bits, 32)
    x = torch.randn(1, K, device=backend.device, dtype=torch.bfloat16)
    outs = [_fp32_run(x, p, Fp32Config(*cfg), BOUND_DET) for cfg in ((1, 4, 3, 32), (16, 4, 3, 32))]
    (k1, lb1, i1, _, _, lg1), (k2, lb2, i2, _, _, lg2) = outs
    assert rel_err(lg1, lg2) < 1e-5
    # bounds agree up to the rounding slack: the GPU dot path's bf16 decode of q + 128 has a
    # larger one, eps = (4 * 131 + 4) * gamma ~ 1% of the INT2 bound here
    b1, b2 = (k1 - lb1) / 2, (k2 - lb2) / 2
    torch.testing.assert_close(b1, b2, rtol=2e-2, atol=1e-6)
    torch.testing.assert_close(k1 - b1, k2 - b2, rtol=1e-4, atol=1e-4)  # the coarse logits


def _fp32_run(x, p, config, bound, n=None, block=BLOCK, kcand=KCAND, tensors=None):
    """The fp32 coarse kernel with an explicit launch configuration (the dispatch picks one per M band)."""
    from lowbit.ops.coarse_head.coarse_fp32 import coarse_fp32
    from lowbit.ops.coarse_head.packing import raw_tensors

    with lowbit.backend("triton"):
        return coarse_fp32(x, p.kind, *(tensors or raw_tensors(p)), n=n or p.n, bits=p.bits, group_size=p.group_size,
                           padded_k=p.padded_k, block=block, kcand=kcand, bound=bound, sigma=4.0, write_logits=True,
                           config=config)


@pytest.mark.parametrize("rerank_rows", [1, 4])
@pytest.mark.parametrize("k", [1, 3])
def test_fused_select_matches_torch_path(backend, monkeypatch, k, rerank_rows):
    """Fused fast select + rerank (select.py) against select_fast + gathered_dot + topk_lowest:
    same indices, same exact values; fillers (the partial last block emits -inf keys), a row with
    tied coarse keys and tied exact values (duplicated weight rows) included; one pick a rerank
    program and four (``RERANK_ROWS``, as from M = 33: R = 7, so the last program holds three)."""
    if not backend.is_triton:
        pytest.skip("the fused selection kernels exist on the Triton tiers only")
    from lowbit.ops.coarse_head import fast_select_rerank, select_fast, topk_lowest
    from lowbit.ops.coarse_head import fast_select as sel_mod
    from lowbit.ops.gathered import gathered_dot

    monkeypatch.setattr(sel_mod, "RERANK_ROWS", rerank_rows)

    n, kdim, block, kcand, r = 300, 96, 64, 3, 7  # 5 blocks; the last holds 44 tokens
    w = torch.randn(n, kdim) * 0.02
    w[[40, 100, 230]] = w[7].clone()  # exact ties across blocks: the lowest index must win
    w = w.to(torch.bfloat16).to(backend.device)
    x = torch.randn(3, kdim).to(backend.device)
    x[2] = w[7].float() * 50  # row 2: tokens 7, 40, 100, 230 tie for the top
    p = pack(w, 4, 32)
    with backend.active():
        out = coarse_head(x, p, block=block, kcand=kcand, bound=BOUND_NONE)
        v, i = fast_select_rerank(out.cand_key, out.cand_idx, x, w, r, k, kcand)  # two-stage selection
        vf, i_f = fast_select_rerank(out.cand_key, out.cand_idx, x, w, r, k)  # flat selection
        idx, valid = select_fast(out, r)
        vals = gathered_dot(x, w, idx)
    vals = torch.where(valid, vals, torch.full_like(vals, float("-inf")))
    rv, ri = topk_lowest(vals.cpu(), idx.cpu(), k)
    assert v.shape == (3, k) and i.dtype == torch.int64
    assert torch.equal(i.cpu(), ri)
    torch.testing.assert_close(v.cpu(), rv, rtol=1e-6, atol=1e-6)
    assert i[2, 0].item() == 7
    assert torch.equal(i_f, i) and torch.equal(vf, v)
    # a second call reuses the counter buffer (left at zero by the last program of each row)
    with backend.active():
        v2, i2 = fast_select_rerank(out.cand_key, out.cand_idx, x, w, r, k, kcand)
    assert torch.equal(i2, i) and torch.equal(v2, v)


def _emitted_candidates(device, m: int, nb: int, kcand: int, kdim: int, token_order: bool = False):
    """Candidates as the coarse pass emits them: keys fp32 [m, nb kcand], each block's best first,
    on a grid of 1/8 so that ties across blocks are common, the last block partial (-inf fillers);
    distinct token ids int64 (``token_order``: increasing with the position, as a coarse pass
    emits them wherever keys tie -- blocks in token order, equal keys lower index first); the
    dense rows w [10 nb kcand, kdim] and x [m, kdim]."""
    c = nb * kcand
    key = (torch.randint(-40, 40, (m, nb, kcand)).float() / 8).sort(dim=-1, descending=True).values
    key[:, -1, kcand // 2:] = float("-inf")
    idx = torch.randperm(10 * c)[:c]
    idx = (idx.sort().values if token_order else idx).repeat(m, 1)
    w = torch.randn(10 * c, kdim) * 0.02
    return key.reshape(m, c).to(device), idx.to(device), w, torch.randn(m, kdim).to(device)


def _select_keeping_sel(monkeypatch, sel_mod, *args):
    """``fast_select_rerank(*args)`` -> (sel [M, R], values, indices), all on the CPU: ``sel`` is
    the first buffer the call allocates."""
    real_empty = torch.empty
    grabbed = []

    def spy_empty(*a, **kw):
        t = real_empty(*a, **kw)
        grabbed.append(t)
        return t

    monkeypatch.setattr(torch, "empty", spy_empty)
    try:
        v, i = sel_mod.fast_select_rerank(*args)
    finally:
        monkeypatch.setattr(torch, "empty", real_empty)
    return grabbed[0].cpu(), v.cpu(), i.cpu()


@pytest.mark.parametrize("token_order", [False, True])
@pytest.mark.parametrize("nb, kcand, r", [(97, 8, 32), (5, 3, 7), (3, 4, 10), (40, 2, 1)])
def test_select_forms_agree(backend, monkeypatch, nb, kcand, r, token_order):
    """The two selection forms (bitonic top-k of block heads then candidates, keyed by token; flat
    successive max, the form for an unknown candidate count) pick the same tokens in the same
    order, from candidate keys with ties (equal keys: the lower position wins), -inf fillers, more
    picks than blocks (3 blocks, 10 picks) and R = 1. With tokens out of position order the
    bitonic form's token keys may order equal keys differently, so only the flat form's picks are
    checked against a sort there."""
    if not backend.is_triton:
        pytest.skip("the fused selection kernels exist on the Triton tiers only")
    from lowbit.ops.coarse_head import fast_select as sel_mod

    m, c = 3, nb * kcand
    key, idx, w, x = _emitted_candidates(backend.device, m, nb, kcand, 64, token_order)
    w = w.to(backend.device)
    sels = [_select_keeping_sel(monkeypatch, sel_mod, key, idx, x, w, r, 1, kc)[0]
            for kc in ((kcand, 0) if token_order else (0,))]
    assert sels[0].shape == (m, min(r, c))
    assert (sels[0][:, :min(r, c - kcand + kcand // 2)] >= 0).all()  # real picks before the fillers
    for other in sels[1:]:
        assert torch.equal(sels[0], other)


@pytest.mark.parametrize("bits,steps", [(2, ("words2", "words_offset")), (4, ("words_offset",)), (8, ("words2",))])
def test_word_steps_match_byte_path(backend, bits, steps):
    """The word-load GEMV steps (two words in flight; the exact 2^bits offset) against the byte
    step of the same band: same candidates, coarse logits and bounds (certified keys)."""
    if not backend.is_triton:
        pytest.skip("launch configurations exist on the Triton tiers only")
    from lowbit.ops.coarse_head.coarse_fp32 import Fp32Config

    m = 1

    n, kdim = 200, 320  # K: padded to 512 for INT2 (zero groups at the end)
    w = (torch.randn(n, kdim) * 0.02).bfloat16().to(backend.device)
    p = pack(w, bits, 64)
    x = torch.randn(m, kdim, device=backend.device, dtype=torch.bfloat16)

    def run(step):
        return _fp32_run(x, p, Fp32Config(1, 4, 3, 0, step), BOUND_DET, block=64, kcand=3)
    k0, lb0, i0, blb0, _, lg0 = run("bytes")
    for v in steps:
        k1, lb1, i1, blb1, _, lg1 = run(v)
        # the GPU dot paths multiply q + 128 (see test_matches_reference): summation order matters more
        magic = backend.name == "cuda" and m > 1
        assert rel_err(lg1, lg0) < (2e-3 if magic else 1e-5)
        if not magic:
            assert torch.equal(i1, i0)
        # 2 x bound: equal up to the rounding slack, larger where a step computes with
        # q + offset ("words_offset": q + 2^bits; eps = (4 (qmax + offset) + 4) gamma(depth))
        torch.testing.assert_close(k1 - lb1, k0 - lb0, rtol=5e-2 if bits == 8 else 3e-3, atol=1e-6)
        assert ((k1 - lb1) >= (k0 - lb0) * (1 - 1e-6)).all() or v != "words_offset"


@pytest.mark.cuda
def test_fused_select_opcheck_cuda():
    w = (torch.randn(300, 128, device="cuda") * 0.02).bfloat16()
    x = torch.randn(3, 128, device="cuda", dtype=torch.bfloat16)
    out = coarse_head(x, pack(w, 4, 64), block=64, kcand=3, bound=BOUND_NONE)
    torch.library.opcheck(torch.ops.lowbit.draft_fast_select.default, (out.cand_key, out.cand_idx, x, w, 6, 2, 3))


# --- the packed-half GEMV (fast mode, M = 1 on the dispatch; one row of x a program) ----------

TRITON_TIERS = [pytest.param("interpret", marks=pytest.mark.interpret), pytest.param("cuda", marks=pytest.mark.cuda)]


@pytest.fixture
def no_wgmma(monkeypatch):
    """Fast mode without the int8-wgmma pass (tests of the mma.sync pass it would take over on sm_90)."""
    from lowbit.ops.coarse_head import dispatch

    monkeypatch.setattr(dispatch, "WGMMA_M_RANGE", {})


@pytest.fixture
def poison_int32(monkeypatch, poison_empty):
    """As ``poison_empty``, and int32 buffers (the packed x pairs) start as fp16 NaN pairs."""
    nan_empty = torch.empty

    def empty(*args, **kwargs):
        t = nan_empty(*args, **kwargs)
        if t.dtype == torch.int32:
            t.fill_(0x7E007E00)
        return t

    monkeypatch.setattr(torch, "empty", empty)


def _h2_run(tier, packing, x, n, block=64, kcand=3):
    from lowbit.ops.coarse_head.gemv_half2 import coarse_gemv_half2

    dev = "cuda" if tier == "cuda" else "cpu"
    p = packing.to(dev) if dev == "cuda" else packing
    f = p.fmt
    with lowbit.backend("triton"):
        out = coarse_gemv_half2(x.to(dev), f.packed, f.scale, f.zero, n=n, bits=p.bits, group_size=p.group_size,
                                block=block, kcand=kcand, write_logits=True)
    return [t.cpu() for t in out]


# Each case crosses a path of the kernel: g >= 64 (the step is one group: fp16 sum over the
# row's four vectors) or g < 64 (a group per vector); one or several K steps, a partial last
# step (LW % 16 != 0: K = 96 at g16); padded K (K % (planes * g) != 0); every x dtype; M > 1.
H2_CASES = [(2, 64, 160, 1, BF16), (2, 64, 576, 3, FP32), (2, 16, 96, 2, BF16), (4, 32, 160, 1, FP16),
            (4, 64, 1024, 1, BF16), (8, 64, 576, 2, BF16), (8, 16, 96, 1, FP32)]


@pytest.mark.parametrize("tier", TRITON_TIERS)
@pytest.mark.parametrize("bits,g,k,m,xdtype", H2_CASES)
def test_packed_half_gemv_matches_reference(tier, poison_int32, bits, g, k, m, xdtype):
    w = (torch.randn(N, k) * 0.02).to(torch.bfloat16)
    x = torch.randn(m, k).to(xdtype)
    packing = pack(w, bits, g)
    with lowbit.backend("reference"):
        ref = coarse_head(x, packing, block=BLOCK, kcand=KCAND, bound=BOUND_NONE, write_logits=True)
    cand_key, _, cand_idx, _, _, logits = _h2_run(tier, packing, x, N, BLOCK, KCAND)
    # fp16 products and partial sums of at most 32 terms: ~2^-11 relative each, so the logits
    # agree to a few 1e-4 (measured 2e-4 .. 6e-4 at these shapes); fp32 kernels agree to 1e-5
    assert not logits.isnan().any() and not cand_key.isnan().any()
    assert rel_err(logits, ref.logits) < 3e-3
    assert rel_err(logits, ref.logits) > 0  # the fp16 path really ran (the fp32 one matches to 1e-6)
    mine = block_candidates_reference(logits, None, block=BLOCK, kcand=KCAND, write_logits=False)
    torch.testing.assert_close(cand_key, mine.cand_key, rtol=0, atol=0)
    assert torch.equal(cand_idx, mine.cand_idx)


@pytest.mark.parametrize("tier", TRITON_TIERS)
def test_packed_half_gemv_scales_x(tier, poison_int32):
    """Rows of x far from unit scale (1e4, 1e-5) and an all-zero row: the per-row power of two
    keeps the fp16 products in range (no inf, no flush to zero); a zero row gives zero logits."""
    k = 576
    w = (torch.randn(N, k) * 0.02).to(torch.bfloat16)
    x = torch.randn(3, k)
    x[0] *= 1e4
    x[1] *= 1e-5
    x[2] = 0.0
    packing = pack(w, 2, 64)
    with lowbit.backend("reference"):
        ref = coarse_head(x, packing, block=BLOCK, kcand=KCAND, bound=BOUND_NONE, write_logits=True)
    logits = _h2_run(tier, packing, x, N)[5]
    for r in range(2):
        assert rel_err(logits[r], ref.logits[r]) < 3e-3
    assert torch.equal(logits[2], torch.zeros(N))


def test_packed_half_gemv_only_for_fast_mode():
    """Certified keys need the fp32 kernels' rounding proof: at M = 1 on a g32 copy (no tensor-core
    pass) the dispatch sends fast mode to the packed-half GEMV and certified mode to the fp32 word
    GEMV, whose bound matches the reference's; g64 takes the mma.sync pass in both modes."""
    from lowbit.ops.coarse_head import coarse, dispatch

    w = torch.randn(N, 576) * 0.02
    x = torch.randn(1, 576)
    for g, want in ((32, {BOUND_NONE: "gemv_half2", BOUND_DET: "coarse_fp32"}),
                    (64, {BOUND_NONE: "mma_f16", BOUND_DET: "mma_f16"})):
        p = pack(w, 4, g)
        assert {b: dispatch.coarse_route(coarse.call_of(p, x, b, BLOCK, False)) for b in want} == want
    big = pack(w, 4, 32)
    if not lowbit._backend.interpret_mode():
        pytest.skip("calls the Triton launcher on CPU tensors: interpreter tier only")
    with lowbit.backend("triton"):
        out = coarse_head(x, big, block=BLOCK, kcand=KCAND, bound=BOUND_DET, write_logits=True)
    with lowbit.backend("reference"):
        ref = coarse_head(x, big, block=BLOCK, kcand=KCAND, bound=BOUND_DET, write_logits=True)
    assert rel_err(out.logits, ref.logits) < 1e-5
    assert out.cand_lb.shape == ref.cand_lb.shape


def test_word_gemv_tail_reads_no_scale_past_the_rows():
    """The word GEMV's second unrolled tile can start past the row (K = 160: 2.5 tiles of 32
    bytes); its scale load must be masked. Scales that sit in a NaN-filled buffer make any read
    past the tensor a NaN logit (it was flaky before: whatever followed the scales on the heap)."""
    if not lowbit._backend.interpret_mode():
        pytest.skip("calls the Triton launcher on CPU tensors: interpreter tier only")
    from lowbit.ops.coarse_head.coarse_fp32 import Fp32Config
    from lowbit.ops.coarse_head.packing import raw_tensors

    packing = pack(torch.randn(N, K) * 0.02, 4, 32)
    x = torch.randn(1, K)
    w, sc, z, gs = raw_tensors(packing)
    guarded = torch.full((sc.shape[0] + 2, sc.shape[1]), float("nan"), dtype=sc.dtype)
    guarded[: sc.shape[0]] = sc
    out = _fp32_run(x, packing, Fp32Config(1, 4, 1, 32, "words2"), BOUND_DET, n=N,
                    tensors=(w, guarded[: sc.shape[0]], z, gs))
    with lowbit.backend("reference"):
        ref = coarse_head(x, packing, block=BLOCK, kcand=KCAND, bound=BOUND_DET, write_logits=True)
    assert not torch.isnan(out[5]).any()
    assert rel_err(out[5], ref.logits) < 1e-5


# --- the tensor-core coarse pass (mma_f16.py: fast M <= 16, certified M <= 8) ---------------------

def test_mma_tile_layout():
    """words[b, s, 2 t + qh, 4 g + c, 2 qi + rh] is word 16 s + 4 (2 qh + qi) + c of row
    32 b + 16 t + 8 rh + g; the scale-zero word of (row, group) holds the fp16 scale and the fp16
    1024 + z 2^(bits j) of the group's plane j."""
    from lowbit.ops.coarse_head.mma_pack import mma_tile

    bits, g = 2, 64
    n, ell = 70, 136  # 34 words a row (a partial third step), 3 row blocks, the last partial
    ng = 4 * ell // g + 1
    packed = torch.randint(0, 256, (n, ell), dtype=torch.uint8)
    scale = torch.randn(n, ng).half()
    zero = torch.randint(0, 4, (n, ng), dtype=torch.uint8)
    words, sz = mma_tile(packed, scale, zero, bits, g)
    assert words.shape == (3, 3, 4, 32, 4) and sz.shape == (3, ng, 32)
    w32 = packed.view(torch.int32)
    for b, s_, t, qh, gg, c, qi, rh in [(0, 0, 0, 0, 0, 0, 0, 0), (1, 1, 1, 0, 5, 3, 1, 1), (2, 0, 0, 1, 2, 1, 0, 1),
                                       (0, 2, 0, 0, 7, 1, 0, 0)]:
        row, word = 32 * b + 16 * t + 8 * rh + gg, 16 * s_ + 4 * (2 * qh + qi) + c
        got = words[b, s_, 2 * t + qh, 4 * gg + c, 2 * qi + rh]
        assert got == (w32[row, word] if row < n and word < ell // 4 else 0)
    row, grp = 45, 3
    lo = (sz[1, grp, row - 32] & 0xFFFF).to(torch.int16).view(torch.float16)
    hi = (sz[1, grp, row - 32] >> 16).to(torch.int16).view(torch.float16)
    assert lo == scale[row, grp] and hi == 1024 + (int(zero[row, grp]) << (bits * (grp * g // ell)))
    assert (sz[2, :, n - 64:] == 0).all()


# every bits; g64 and g128; M = 1, 3, 8 (the MMA's 8 columns, partly used); N = 300 leaves
# partial 32-row tiles and blocks; K 576 / 320 at g64 pad; blocks of 32 / 64 / 128 tokens (1-4
# warps; block 32 at K 320: its ten programs are the interpreter tier's slowest case at K 576)
MMA_CASES = [(2, 64, 576, 1, BF16, 64), (2, 128, 1024, 8, FP32, 128), (4, 64, 320, 3, FP16, 32),
             (4, 64, 160, 1, BF16, 64), (8, 64, 576, 2, BF16, 64), (8, 128, 256, 8, FP32, 128)]


@pytest.mark.parametrize("tier", TRITON_TIERS)
@pytest.mark.parametrize("bits,g,k,m,xdtype,block", MMA_CASES)
def test_mma_coarse_matches_reference(tier, poison_int32, no_wgmma, bits, g, k, m, xdtype, block):
    """coarse_head in fast mode on the tensor-core path against the reference: logits within x's
    fp16 rounding, candidates those of its own logits, outputs NaN-poisoned before the call."""
    n = 300
    w = (torch.randn(n, k) * 0.02).to(torch.bfloat16)
    x = torch.randn(m, k).to(xdtype)
    packing = pack(w, bits, g)
    with lowbit.backend("reference"):
        ref = coarse_head(x, packing, block=block, kcand=KCAND, bound=BOUND_NONE, write_logits=True)
    dev = "cuda" if tier == "cuda" else "cpu"
    p = packing.to(dev) if dev == "cuda" else packing
    with lowbit.backend("triton"):
        out = coarse_head(x.to(dev), p, block=block, kcand=KCAND, bound=BOUND_NONE, write_logits=True)
        quiet = coarse_head(x.to(dev), p, block=block, kcand=KCAND, bound=BOUND_NONE, write_logits=False)
    assert p._mma is not None  # the tensor-core path ran
    logits, cand_key, cand_idx = out.logits.cpu(), out.cand_key.cpu(), out.cand_idx.cpu()
    # x rounded to fp16 (2^-11 relative), products exact, fp32 sums: ~2e-4 of the logits
    assert not logits.isnan().any() and not cand_key.isnan().any()
    assert 0 < rel_err(logits, ref.logits) < 2e-3
    mine = block_candidates_reference(logits, None, block=block, kcand=KCAND, write_logits=False)
    torch.testing.assert_close(cand_key, mine.cand_key, rtol=0, atol=0)
    assert torch.equal(cand_idx, mine.cand_idx)
    assert quiet.logits.shape == (0, n) and torch.equal(quiet.cand_idx.cpu(), cand_idx)


@pytest.mark.parametrize("tier", TRITON_TIERS)
@pytest.mark.parametrize("bits,k,m", [(2, 512, 1), (4, 160, 9), (8, 256, 2)])  # NS = 2 / 2 / 4 K steps
def test_mma_coarse_prefetch_modes_agree(tier, poison_int32, no_wgmma, monkeypatch, bits, k, m):
    """The K-loop schedules of the tensor-core pass (PREFETCH 0: loads at the top of each step;
    1: one step ahead through a register buffer, the last prefetch masked off) run the same MMAs
    in the same order: identical outputs, whichever the table picks for these bits."""
    from lowbit.ops.coarse_head import mma_f16

    w = (torch.randn(300, k) * 0.02).to(torch.bfloat16)
    x = torch.randn(m, k).to(torch.bfloat16)
    dev = "cuda" if tier == "cuda" else "cpu"
    p = pack(w, bits, 64)
    p = p.to(dev) if dev == "cuda" else p
    outs = []
    for mode in (0, 1):
        monkeypatch.setattr(mma_f16, "_PREFETCH_TABLE", {(bits, 1): mode, (bits, 2): mode})
        with lowbit.backend("triton"):
            outs.append(coarse_head(x.to(dev), p, block=64, kcand=KCAND, bound=BOUND_NONE, write_logits=True))
    assert p._mma is not None
    assert not outs[0].logits.isnan().any()
    for o in outs[1:]:
        assert torch.equal(o.logits, outs[0].logits) and torch.equal(o.cand_idx, outs[0].cand_idx)


@pytest.mark.parametrize("tier", TRITON_TIERS)
def test_mma_coarse_scales_x_and_falls_back(tier, poison_int32, no_wgmma, monkeypatch):
    """Rows of x at 1e4 / 1e-5 and an all-zero row (the per-row power of two keeps x' a normal
    fp16); M = 19 (a launch of 16 rows on two B column tiles, then one of 3) against the
    reference; the statistical bound never takes the tensor cores."""
    k = 576
    dev = "cuda" if tier == "cuda" else "cpu"
    w = (torch.randn(N, k) * 0.02).to(torch.bfloat16)
    packing = pack(w, 2, 64)
    p = packing.to(dev) if dev == "cuda" else packing
    x = torch.randn(3, k)
    x[0] *= 1e4
    x[1] *= 1e-5
    x[2] = 0.0
    with lowbit.backend("reference"):
        ref = coarse_head(x, packing, block=BLOCK, kcand=KCAND, bound=BOUND_NONE, write_logits=True)
        ref_cert = coarse_head(x[:1], packing, block=BLOCK, kcand=KCAND, bound=BOUND_STAT, write_logits=True)
    p._mma = None  # (pack() may hand out a packing an earlier test already tiled)
    with lowbit.backend("triton"):
        cert = coarse_head(x[:1].to(dev), p, block=BLOCK, kcand=KCAND, bound=BOUND_STAT, write_logits=True)
        assert p._mma is None  # statistical keys: the fp32 kernels
        out = coarse_head(x.to(dev), p, block=BLOCK, kcand=KCAND, bound=BOUND_NONE, write_logits=True)
        assert p._mma is not None
        x19 = torch.randn(19, k)
        from lowbit.ops.coarse_head import dispatch

        monkeypatch.setitem(dispatch.MMA_MAX_M, BOUND_NONE, 32)  # (the default stops at 16)
        # under the interpreter 100 rows (two blocks, the last partial) stand in for the whole head:
        # enough for the 16 + 3 row split, and this part a third as long
        if dev == "cuda":
            packing19, p19 = packing, p
        else:
            packing19 = p19 = pack(w[:100].clone(), 2, 64)
        many = coarse_head(x19.to(dev), p19, block=BLOCK, kcand=KCAND, bound=BOUND_NONE, write_logits=True)
    with lowbit.backend("reference"):
        ref19 = coarse_head(x19, packing19, block=BLOCK, kcand=KCAND, bound=BOUND_NONE, write_logits=True)
    for r in range(19):  # rows 0..15: one launch, two B column tiles; rows 16..18: a second launch
        assert rel_err(many.logits[r].cpu(), ref19.logits[r]) < 2e-3
    mine = block_candidates_reference(many.logits.cpu(), None, block=BLOCK, kcand=KCAND, write_logits=False)
    assert torch.equal(many.cand_idx.cpu(), mine.cand_idx)
    assert rel_err(cert.logits.cpu(), ref_cert.logits) < 1e-5
    logits = out.logits.cpu()
    for r in range(2):
        assert rel_err(logits[r], ref.logits[r]) < 2e-3
    assert torch.equal(logits[2], torch.zeros(N))


# bits, g, K, M, x dtype: NS = 9 / 2 / 4 K steps; M = 19 is a launch of 16 rows and one of 3;
# fp32 x loses bits to fp16 (the bound's ||x - x~|| term covers it)
MMA_CERT_CASES = [(8, 64, 576, 1, BF16), (2, 64, 512, 3, FP16), (4, 128, 256, 19, FP32)]


@pytest.mark.parametrize("tier", TRITON_TIERS)
@pytest.mark.parametrize("bits,g,k,m,xdtype", MMA_CERT_CASES)
def test_mma_certified_bound_is_sound(tier, poison_int32, bits, g, k, m, xdtype, monkeypatch):
    """The deterministic bound on the tensor-core pass: lb <= exact <= ub for every emitted
    token, block lower bounds and unemitted keys sound, on rows scaled by 1e4 / 1e-5 and an
    all-zero row; the bound within a few % of the reference's (its rounding slack is larger:
    the decode offset 1024, at a shallower summation depth)."""
    from lowbit.ops.coarse_head import dispatch

    monkeypatch.setitem(dispatch.MMA_MAX_M, BOUND_DET, 32)
    n = 300
    dev = "cuda" if tier == "cuda" else "cpu"
    w = (torch.randn(n, k) * 0.02).to(torch.bfloat16)
    x = torch.randn(m, k)
    if m >= 3:
        x[0] *= 1e4
        x[1] *= 1e-5
        x[2] = 0.0
    x = x.to(xdtype)
    packing = pack(w, bits, g)
    p = packing.to(dev) if dev == "cuda" else packing
    with lowbit.backend("reference"):
        ref = coarse_head(x, packing, block=BLOCK, kcand=KCAND, bound=BOUND_DET, write_logits=True)
    p._mma = None
    with lowbit.backend("triton"):
        out = coarse_head(x.to(dev), p, block=BLOCK, kcand=KCAND, bound=BOUND_DET, write_logits=True)
    assert p._mma is not None  # the tensor-core path ran
    out = type(out)(*(t.cpu() for t in out))
    for t in (out.cand_key, out.cand_lb, out.block_lb, out.block_rest, out.logits):
        assert not t.isnan().any()
    exact = _exact64(x.float(), w)
    cand_exact = exact.gather(1, out.cand_idx)
    real = out.cand_key > float("-inf")
    assert (out.cand_lb.double()[real] <= cand_exact[real]).all() and (cand_exact[real] <= out.cand_key.double()[real]).all()
    nb = -(-n // BLOCK)
    blocks = torch.nn.functional.pad(exact, (0, nb * BLOCK - n), value=float("-inf")).view(m, nb, BLOCK)
    assert (out.block_lb.double() <= blocks.amax(-1)).all()
    assert (out.block_rest.double() >= blocks.sort(-1, descending=True).values[..., KCAND]).all()
    live = x.float().abs().sum(-1) > 0
    b_out = ((out.cand_key - out.cand_lb) / 2)[live]
    b_ref = ((ref.cand_key - ref.cand_lb) / 2)[live]
    ratio = b_out.sort(-1).values / b_ref.sort(-1).values
    hi = 1.6 if xdtype == FP32 else 1.06  # fp32 x: + 2 (qmax + 1) ||x - x~||_1 on a 2^-11 residual
    assert ratio.min() > 0.95 and ratio.max() < hi, (ratio.min(), ratio.max())  # the slacks differ by < 5%
    assert rel_err(out.logits[live], ref.logits[live]) < 2e-3


@pytest.mark.parametrize("tier", TRITON_TIERS)
@pytest.mark.parametrize("write_logits", [True, False])
def test_opcheck_mma_tiling(tier, write_logits):
    """The registered op over the tensor-core pass's private tiling: fake shapes, no aliasing of
    inputs or outputs (an empty logits output is a fresh tensor)."""
    dev = "cuda" if tier == "cuda" else "cpu"
    w = (torch.randn(300, 128) * 0.02).bfloat16()
    p = pack(w, 2, 64)
    p = p.to(dev) if dev == "cuda" else p
    x = torch.randn(2, 128, dtype=torch.bfloat16).to(dev)
    from lowbit.ops.coarse_head import coarse

    words, sz = p.mma_tiled()
    route = coarse._ROUTES.index("mma_f16")
    args = (x, words, sz, sz, p.fmt.scale, route, p.kind, 2, 64, 300, p.padded_k, 64, 3, BOUND_NONE, 4.0,
            write_logits)
    with lowbit.backend("triton"):
        torch.library.opcheck(torch.ops.lowbit.coarse_head.default, args,
                              test_utils=("test_schema", "test_faketensor", "test_autograd_registration"))


def test_device_state_grows_and_keeps_the_replaced_state(monkeypatch):
    """The sync-free kernels' per-device state: reused while it serves the rows, replaced by a
    larger one when it does not, and the replaced one kept alive (a CUDA graph captured with it
    still points at its memory)."""
    import weakref

    from lowbit.ops.coarse_head import scratch as _state

    cache, dev = {}, torch.device("cpu")
    monkeypatch.setattr(_state, "_RETIRED", [])  # this test's retirements alone (others' tensors stay retired)

    def make(device, rows):
        return torch.zeros(max(rows, 64), dtype=torch.int32, device=device)

    small = _state.device_state(cache, dev, 10, make, torch.Tensor.numel)
    assert small.numel() == 64 and _state.device_state(cache, dev, 64, make, torch.Tensor.numel) is small
    ref = weakref.ref(small)
    del small
    big = _state.device_state(cache, dev, 100, make, torch.Tensor.numel)
    assert big.numel() == 100 and cache[_state.stream_key(dev)] is big
    assert ref() is not None and len(_state._RETIRED) == 1 and _state._RETIRED[0] is ref()


def test_device_state_threads_share_one_state():
    """Threads growing one state at once: every caller gets a state that serves its rows, one state
    stays in the cache, and every replaced one is retired (none dropped while a kernel may use it)."""
    import threading

    from lowbit.ops.coarse_head import scratch

    cache, dev, made = {}, torch.device("cpu"), []
    start = threading.Barrier(8)

    def make(device, rows):
        t = torch.zeros(rows, dtype=torch.int32)
        made.append(t)
        return t

    got = []

    def run(i):
        start.wait()
        for rows in range(1, 200):
            got.append((rows, scratch.device_state(cache, dev, rows + i, make, torch.Tensor.numel)))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(s.numel() >= r for r, s in got)
    final = cache[scratch.stream_key(dev)]
    assert all(any(t is r for r in scratch._RETIRED) for t in made if t is not final)
    scratch._RETIRED[:] = [r for r in scratch._RETIRED if not any(r is t for t in made)]


def test_device_state_made_in_a_capture_is_not_cached(monkeypatch):
    """A state made inside a CUDA-graph capture is zeroed only by the graph's replay: it is kept
    alive for the graph but not cached, so the next eager call makes (and zeroes) its own."""
    from lowbit.ops.coarse_head import scratch

    cache, dev = {}, torch.device("cpu")
    monkeypatch.setattr(scratch, "capturing", lambda device: True)
    in_graph = scratch.device_state(cache, dev, 4, lambda d, r: torch.zeros(r), torch.Tensor.numel)
    assert not cache and any(r is in_graph for r in scratch._RETIRED)
    monkeypatch.setattr(scratch, "capturing", lambda device: False)
    eager = scratch.device_state(cache, dev, 4, lambda d, r: torch.zeros(r), torch.Tensor.numel)
    assert eager is not in_graph and cache[scratch.stream_key(dev)] is eager
    # a cached state that serves the rows is what a capture uses (the warm-up pattern)
    monkeypatch.setattr(scratch, "capturing", lambda device: True)
    assert scratch.device_state(cache, dev, 3, lambda d, r: torch.zeros(r), torch.Tensor.numel) is eager
    scratch._RETIRED[:] = [r for r in scratch._RETIRED if r is not in_graph]


@pytest.mark.cuda
def test_cuda_device_state_per_stream():
    """Two streams of one device get two states (concurrent calls would otherwise share counters)."""
    from lowbit.ops.coarse_head import scratch

    cache, dev = {}, torch.device("cuda")

    def make(device, rows):
        return torch.zeros(rows, dtype=torch.int32, device=device)

    a = scratch.device_state(cache, dev, 4, make, torch.Tensor.numel)
    with torch.cuda.stream(torch.cuda.Stream()):
        b = scratch.device_state(cache, dev, 4, make, torch.Tensor.numel)
    assert a is not b and len(cache) == 2
    assert scratch.device_state(cache, dev, 4, make, torch.Tensor.numel) is a
