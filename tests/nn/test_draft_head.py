"""lowbit.DraftHead: certified exactness on adversarial rows, fast mode, logits, lifecycle, errors."""
from __future__ import annotations

import pytest
import torch

import lowbit
from lowbit.formats import FP8, NVFP4, INTx
from lowbit.nn.draft_head import DraftHead
from lowbit.ops.coarse_head import dispatch as _dispatch

N, K, M = 317, 80, 4  # N: partial last block; K: a multiple of 16, not of 32
#: the library's threshold of the fused certified argmax, before the fixture below moves it
DEFAULT_FUSED_MIN_M = _dispatch.FUSED_ARGMAX_MIN_M


@pytest.fixture(autouse=True)
def _intx_certified_argmax(monkeypatch):
    """Certified argmax on the INTx coarse pass unless a test asks for the fused one over the
    stored rows (``_fused_only``): most cases here are about the INTx path's sets, statistics and
    fallbacks, at M = 4 (above the fused path's default threshold)."""
    monkeypatch.setattr(_dispatch, "FUSED_ARGMAX_MIN_M", 2**31)


def _dense(weight) -> torch.Tensor:
    return weight if isinstance(weight, torch.Tensor) else weight.dequantize(torch.float32)


def _exact64(x, weight):
    return x.double().cpu().reshape(-1, K) @ _dense(weight).double().cpu().t()


def _topk64(exact, k):
    """fp64 top-k, ties to the lower index (stable sort of the index-ordered row)."""
    order = exact.argsort(dim=-1, descending=True, stable=True)[:, :k]
    return exact.gather(1, order), order


def _case(name: str, dtype=torch.bfloat16):
    """(weight [N, K], x [M, K]) for one adversarial situation."""
    g = torch.Generator().manual_seed(7)
    w = torch.randn(N, K, generator=g) * 0.02
    x = torch.randn(M, K, generator=g)
    if name == "near_ties":  # six rows (in five blocks) whose logits differ by ~1e-3 relative
        for i, j in enumerate((75, 140, 205, 270, 300)):
            w[j] = w[10] * (1 + 1e-3 * (i + 1))
        x = w[10].sign().expand(M, K) * (1 + torch.rand(M, K, generator=g))
    elif name == "dominant":  # one token far ahead of all others in every row
        v = torch.randn(K, generator=g).sign()
        x = v * (0.5 + torch.rand(M, K, generator=g))
        w[200] = 0.1 * v
    elif name == "all_equal":  # every row identical: all logits tie, lowest index wins
        w = w[:1].expand(N, K).clone()
    elif name == "planted":  # token 250 wins row 0 by a hair, but its INT4 coarse logit is lower
        w, x = _planted(w, x, g)
    return w.to(dtype), x.to(dtype)


def _planted(w, x, g):
    v = torch.randn(K, generator=g).sign()
    x = v * (0.5 + torch.rand(M, K, generator=g))
    w[50] = 0.03 * v + 0.01 * torch.randn(K, generator=g)  # the runner-up, far ahead of the rest
    xb = x[0].bfloat16().double()
    for _ in range(2000):
        w[250] = w[50] + 2e-3 * torch.randn(K, generator=g)
        pair = w[[50, 250]].bfloat16()  # rows quantize independently: as in the whole head
        exact = pair.double() @ xb
        coarse = INTx.quantize(pair, 4, 32).dequantize().double() @ xb
        if exact[1] > exact[0] and coarse[1] < coarse[0]:  # row 0 of x: winner underrated
            return w, x
    raise AssertionError("no planted row found: the test premise failed")


def _assert_exact(head, x, weight, k=5):
    exact = _exact64(x, weight)
    am = head.argmax(x)
    assert am.dtype == torch.int64 and am.shape == x.shape[:-1]
    ref_v, ref_i = _topk64(exact, k)
    assert torch.equal(am.cpu(), ref_i[:, 0])
    v, i = head.topk(x, k)
    assert v.dtype == torch.float32 and i.dtype == torch.int64 and v.shape == (*x.shape[:-1], k)
    assert torch.equal(i.cpu(), ref_i)
    torch.testing.assert_close(v.cpu().double(), ref_v, rtol=1e-5, atol=1e-5)


CASES = ["random", "near_ties", "dominant", "all_equal", "planted"]


# case -> (bits, set path expected): the certified set decides the argmax of these rows without a
# fallback, except all-equal rows, where every token ties and the fallback keeps the lowest index.
CASE_BITS = {"random": (8, True), "near_ties": (4, True), "dominant": (2, True), "all_equal": (4, False),
             "planted": (4, True)}


@pytest.mark.parametrize("case", CASES)
def test_certified_exact(backend, case):
    if backend.name == "interpret" and case in ("random", "near_ties", "dominant"):
        pytest.skip("interpreter time budget: planted / all-equal cover the kernel path there; "
                    "these cases run on the reference and cuda tiers")
    bits, set_path = CASE_BITS[case]
    w, x = _case(case)
    w, x = w.to(backend.device), x.to(backend.device)
    with backend.active():
        head = DraftHead(w, bits=bits, group_size=32, mode="certified", kcand=4, rerank=64, block=64)
        head.argmax(x)
        st = head.stats
        assert (st["fallbacks"] + st["wide"] == 0) == set_path, st  # argmax: set path or not
        _assert_exact(head, x, w)
    assert head.stats["calls"] == 3 and head.stats["rows"] == 3 * M


@pytest.mark.parametrize("fmt", ["int8", "int4_stat", "fp8_native", "nvfp4_native", "fp32_x"])
def test_certified_exact_formats(backend, fmt):
    if backend.name == "interpret" and fmt in ("int8", "fp32_x"):
        pytest.skip("interpreter time budget: INT8 runs in test_certified_exact there, and fp32 x in "
                    "tests/ops/test_coarse_head.py; this case runs on the reference and cuda tiers")
    w, x = _case("random")
    kwargs = dict(mode="certified", block=64)
    if fmt == "int8":
        weight, kwargs["bits"] = w, 8
    elif fmt == "int4_stat":
        weight, kwargs["bits"], kwargs["bound"] = w, 4, "stat"
    elif fmt == "fp8_native":
        weight, kwargs["bits"] = FP8.quantize(w.float(), "row"), None
    elif fmt == "nvfp4_native":
        weight, kwargs["bits"] = NVFP4.quantize(w.float()), None
    else:
        weight, x, kwargs["bits"] = w.float(), x.float(), 8
    weight, x = weight.to(backend.device), x.to(backend.device)
    with backend.active():
        head = DraftHead(weight, **kwargs)
        _assert_exact(head, x, weight)


@pytest.mark.parametrize("bits,path", [(2, "fallbacks"), (8, "wide")])
def test_certified_fallback_counts(backend, bits, path):
    """A cap of 1 forces a fallback on nearly every row: INT8 sets stay among the candidates (all
    candidates rescored: "wide"); INT2 blocks may hide members (whole rows scored: "fallbacks").
    The answer stays exact either way."""
    w, x = _case("near_ties" if bits == 8 else "random")
    w, x = w.to(backend.device), x.to(backend.device)
    with backend.active():
        head = DraftHead(w, bits=bits, group_size=32, mode="certified", rerank=1, block=64)
        _assert_exact(head, x, w)
    st = head.stats
    assert st[path] >= M and st["mean_set_size"] > 1, st


def _triton_only(backend):
    if not backend.is_triton:
        pytest.skip("the sync-free certified path is the Triton path's; the reference tier has no counterpart")


@pytest.mark.parametrize("case,bits,group", [("random", 8, 32), ("all_equal", 4, 32), ("planted", 8, 64)])
def test_certified_device_path_matches_sync_path(backend, case, bits, group, monkeypatch):
    """The sync-free certified path (device selection, rescoring and fallback) gives the same
    answers and statistics as the synchronizing one; all-equal rows exercise the fallback kernel,
    g64 the tensor-core coarse pass with the deterministic bound."""
    _triton_only(backend)
    w, x = _case(case)
    w, x = w.to(backend.device), x.to(backend.device)
    got = {}
    for sync_free in (True, False):  # the synchronizing path, as FP8 / NVFP4 heads and k > 64 take it
        monkeypatch.setattr(_dispatch, "CERTIFIED_MAX_K", 64 if sync_free else 0)
        with backend.active():
            head = DraftHead(w, bits=bits, group_size=group, mode="certified", kcand=4, rerank=64, block=64)
            got[sync_free] = (head.argmax(x), *head.topk(x, 5), head.stats)
        assert (head.packing._mma is not None) == (group == 64)  # which coarse pass ran
        assert (head._stats.device is not None) == sync_free
    (a1, v1, i1, s1), (a0, v0, i0, s0) = got[True], got[False]
    assert torch.equal(a1, a0) and torch.equal(i1, i0)
    torch.testing.assert_close(v1, v0, rtol=1e-6, atol=1e-6)
    assert s1 == s0, (s1, s0)
    _assert_exact_values(x, w, a1, v1, i1)


def _assert_exact_values(x, w, am, v, i):
    ref_v, ref_i = _topk64(_exact64(x, w), v.shape[-1])
    assert torch.equal(am.cpu(), ref_i[:, 0]) and torch.equal(i.cpu(), ref_i)
    torch.testing.assert_close(v.cpu().double(), ref_v, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dot,k", [(False, 64), (True, 16)])
def test_certified_device_fallback_merge(backend, monkeypatch, dot, k):
    """Every row scored in full (a cap of 1 on INT2 sets) by 20 fallback programs of 64 (k = 64,
    the path's largest: their lists merged in two chunks) or 16 tokens, in the ticketed launch with
    the rescoring; one row at a time or 16 rows per weight tile on the tensor cores (as from
    ``FULL_DOT_MIN_M`` rows)."""
    _triton_only(backend)
    if backend.name == "interpret" and k == 64:
        pytest.skip("interpreter time budget (about a minute): k = 16 runs the same fused launch and "
                    "merge here; the two-chunk merge of k = 64 runs on the cuda tier")
    from lowbit.ops.coarse_head import certified_tail

    monkeypatch.setattr(certified_tail, "FULL_BN", 16)
    monkeypatch.setattr(certified_tail, "FULL_DOT_MIN_M", 0 if dot else 2**31)
    w, x = _case("random")
    w, x = w.to(backend.device), x.to(backend.device)
    with backend.active():
        head = DraftHead(w, bits=2, group_size=32, mode="certified", rerank=1, block=64)
        am = head.argmax(x)
        v, i = head.topk(x, k)
    st = head.stats
    assert st["fallbacks"] + st["wide"] == 2 * M and st["calls"] == 2 and st["rows"] == 2 * M, st
    _assert_exact_values(x, w, am, v, i)


@pytest.mark.parametrize("dot,k,full_row", [(False, 1, False), (False, 5, False), (True, 5, False), (False, 5, True),
                                            (True, 5, True)])
def test_certified_device_wide_rows(backend, monkeypatch, dot, k, full_row):
    """A wide row (more members than the cap, no block that may hide one) is answered from its
    candidates, as the synchronizing path answers it, where the fallback scores one row at a time
    (below ``FULL_DOT_MIN_M`` rows); with the tensor-core batches it is scored in full among them.
    Every other weight row scores far above the candidates here (bounds that do not hold for
    them), so the two answers differ. ``full_row``: row 0 has every block hiding members and is
    scored in full beside them (its answer: the best non-candidates)."""
    _triton_only(backend)
    from lowbit.ops.coarse_head import certified_tail
    from lowbit.ops.coarse_head.pipeline import CERTIFIED_STATS

    monkeypatch.setattr(certified_tail, "FULL_BN", 16)
    monkeypatch.setattr(certified_tail, "FULL_DOT_MIN_M", 0 if dot else 2**31)
    n, kk, block, kcand, m = 512, 64, 64, 4, 3
    g = torch.Generator().manual_seed(11)
    tok = (torch.arange(n // block)[:, None] * block + torch.randperm(block, generator=g)[:kcand]).flatten()
    w = torch.ones(n, kk)
    w[tok] = torch.randn(tok.numel(), kk, generator=g) * 0.02
    w = w.bfloat16()
    x = (torch.randn(m, kk, generator=g).abs() + 0.1).bfloat16()  # > 6 on each non-candidate
    exact = x.double() @ w[tok].double().T  # [m, C]: the candidates' exact logits
    # valid bounds 1 apart, each block's best lower bound, and no unemitted token above anything
    ub, lb = (exact + 1).float(), (exact - 1).float()
    blb = lb.view(m, n // block, kcand).amax(-1)
    rest = torch.full_like(blb, float("-inf"))
    if full_row:
        rest[0] = float("inf")
    dev = backend.device
    stats = torch.zeros(len(CERTIFIED_STATS), dtype=torch.int64, device=dev)
    v, i = certified_tail.certified_select_rerank(
        ub.to(dev), lb.to(dev), tok.expand(m, -1).contiguous().to(dev), blb.to(dev), rest.to(dev), x.to(dev),
        w.to(dev), k, 2, block, stats)
    ref_v, ref_pos = exact.topk(k, dim=-1)
    ref_i, cand_i = tok[ref_pos], tok[ref_pos]
    for r in range(m):
        if dot or (full_row and r == 0):  # the whole row: ties (the equal non-candidate rows) to the lower index
            full = (x[r].double() @ w.double().T).sort(descending=True, stable=True)
            ref_v[r], ref_i[r] = full.values[:k], full.indices[:k]
    assert torch.equal(ref_i, cand_i) is (not dot and not full_row)  # a whole-row pass answers otherwise
    assert torch.equal(i.cpu(), ref_i)
    torch.testing.assert_close(v.cpu().double(), ref_v, rtol=1e-5, atol=1e-6)
    st = dict(zip(CERTIFIED_STATS, stats.tolist()))
    assert st["rows"] == m and st["wide"] == m - full_row and st["fallbacks"] == full_row, st
    assert full_row or st["set_sum"] == m * tok.numel(), st


def test_certified_k_above_device_limit(backend):
    """top-k with k > CERTIFIED_MAX_K (64) takes the synchronizing path, exact all the same."""
    _triton_only(backend)
    from lowbit.ops.coarse_head import CERTIFIED_MAX_K

    w, x = _case("random")
    w, x = w.to(backend.device), x.to(backend.device)
    k = CERTIFIED_MAX_K + 1
    with backend.active():
        head = DraftHead(w, bits=8, group_size=32, mode="certified", kcand=8, rerank=256, block=64)
        v, i = head.topk(x, k)
    assert head._stats.device is None  # no device-path call
    ref_v, ref_i = _topk64(_exact64(x, w), k)
    assert torch.equal(i.cpu(), ref_i)
    torch.testing.assert_close(v.cpu().double(), ref_v, rtol=1e-5, atol=1e-5)


def _fused_only(backend, monkeypatch, min_m=1, cap=None):
    """Certified argmax through the one-launch fused kernel from ``min_m`` rows (Triton tiers)."""
    _triton_only(backend)
    from lowbit.ops.coarse_head import fused_argmax

    monkeypatch.setattr(_dispatch, "FUSED_ARGMAX_MIN_M", min_m)
    if cap is not None:
        monkeypatch.setattr(fused_argmax, "LIST_CAP", cap)


@pytest.fixture
def poison_fused(monkeypatch, poison_empty):
    """As ``poison_empty`` (float buffers start as NaN), and the fused argmax's integer buffers
    start as sentinels: token records as 2^31 - 1 (past any N), the answers as -7."""
    nan_empty = torch.empty

    def empty(*args, **kwargs):
        t = nan_empty(*args, **kwargs)
        if t.dtype == torch.int32:
            t.fill_(2**31 - 1)
        elif t.dtype == torch.int64:
            t.fill_(-7)
        return t

    monkeypatch.setattr(torch, "empty", empty)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_fused_argmax_exact(backend, monkeypatch, poison_fused, case, dtype):
    """The fused certified argmax (stored rows as the coarse pass, selection in the last program)
    is exact on every adversarial case: near-ties put two members in one block of 128 (the
    block's tokens rescored), all-equal rows tie everywhere (every block rescored, lowest index)."""
    _fused_only(backend, monkeypatch)
    w, x = _case(case, dtype)
    w, x = w.to(backend.device), x.to(backend.device)
    with backend.active():
        head = DraftHead(w, mode="certified", block=64)
        am = head.argmax(x)
        am2 = head.argmax(x)  # the scratch is left clean: a second call agrees
    assert head._state.norms is not None and head._stats.device is not None  # the fused path ran
    assert torch.equal(am, am2)
    assert torch.equal(am.cpu(), _topk64(_exact64(x, w), 1)[1][:, 0])
    st = head.stats
    assert st["calls"] == 2 and st["rows"] == 2 * M, st
    if case in ("random", "dominant"):
        assert st["fallbacks"] == 0 and st["max_set_size"] == 1, st
    if case == "all_equal":
        assert st["fallbacks"] == 2 * M, st


@pytest.mark.parametrize("case,cap", [("all_equal", 2), ("near_ties", 1), ("random", 1)])
def test_fused_argmax_list_overflow(backend, monkeypatch, poison_fused, case, cap):
    """More registered blocks than a row's list holds: the row's per-block records decide, still
    exact."""
    _fused_only(backend, monkeypatch, cap=cap)
    w, x = _case(case)
    w, x = w.to(backend.device), x.to(backend.device)
    with backend.active():
        head = DraftHead(w, mode="certified")
        am = head.argmax(x)
    assert torch.equal(am.cpu(), _topk64(_exact64(x, w), 1)[1][:, 0])


#: one BM 64 tile of 8 warps (the last program answers in two chunks of ANSWER_ROWS)
_ONE_TILE_64 = (64, 8, 3, 80, 128)


@pytest.mark.parametrize("m,tile", [(16, None), (19, None), (40, None), (70, None), (40, 16), (40, 64), (70, 64)])
def test_fused_argmax_m_tiles(backend, monkeypatch, m, tile):
    """16 rows (above the default threshold), a partial tile (19 rows: BM 32), band 64 as the
    library runs it (M tiles of 32 side by side in the grid, each with its own tickets: 40 rows =
    a full and a partial tile, 70 = three); ``tile`` overrides band 64's M tile: 16 (three tiles,
    the last partial) or one / two tiles of 64 rows (the last program answers in two chunks). An
    fp32 x takes the INTx path instead (same answers)."""
    _fused_only(backend, monkeypatch, min_m=DEFAULT_FUSED_MIN_M)
    if backend.name == "interpret" and m == 70:
        pytest.skip("interpreter time budget: the three- and two-tile band-64 cases run on the cuda tier")
    if tile is not None:
        from lowbit.ops.coarse_head import fused_argmax

        cfg = _ONE_TILE_64 if tile == 64 else (tile,) + fused_argmax._CONFIGS[tile][1:]
        monkeypatch.setitem(fused_argmax._CONFIGS, 64, cfg)
    g = torch.Generator().manual_seed(m)
    w = (torch.randn(600, 96, generator=g) * 0.05).bfloat16().to(backend.device)
    x = torch.randn(m, 96, generator=g).bfloat16().to(backend.device)
    ref = _topk64((x.double().cpu() @ w.double().cpu().t()), 1)[1][:, 0]
    with backend.active():
        head = DraftHead(w, mode="certified")
        am = head.argmax(x)
        assert head._state.norms is not None  # fused
        assert torch.equal(head.argmax(x.float()).cpu(), ref)
    assert torch.equal(am.cpu(), ref)
    assert head.stats["rows"] == 2 * m


def test_fast_matches_reference(backend):
    w, x = _case("random")
    x = x.reshape(2, 2, K)  # [..., K] inputs
    with lowbit.backend("reference"):
        ref = DraftHead(w, bits=4, mode="fast", kcand=2, rerank=8, block=64)
        ra, (rv, ri) = ref.argmax(x), ref.topk(x, 4)
    wd, xd = w.to(backend.device), x.to(backend.device)
    with backend.active():
        head = DraftHead(wd, bits=4, mode="fast", kcand=2, rerank=8, block=64)
        a, (v, i) = head.argmax(xd), head.topk(xd, 4)
    assert a.shape == (2, 2) and v.shape == (2, 2, 4)
    assert torch.equal(a.cpu(), ra) and torch.equal(i.cpu(), ri)
    torch.testing.assert_close(v.cpu(), rv, rtol=1e-5, atol=1e-5)
    # values are exact for the returned indices, and INT4 + rerank finds the argmax here
    exact = _exact64(x, w)
    torch.testing.assert_close(v.cpu().double().reshape(-1, 4), exact.gather(1, i.cpu().reshape(-1, 4)), rtol=1e-5, atol=1e-5)
    assert (a.cpu().reshape(-1) == exact.argmax(-1)).float().mean() >= 3 / 4


@pytest.mark.parametrize("mode", ["fast", "certified"])
def test_logits(backend, mode):
    w, x = _case("dominant")
    w, x = w.to(backend.device), x.to(backend.device)
    with backend.active():
        head = DraftHead(w, bits=4, mode=mode, block=64, kcand=4, rerank=16)
        full = head.logits(x)
        only = head(x, topk_only=True)
    exact = _exact64(x, w)
    assert full.shape == (M, N) and full.dtype == torch.float32 and not full.isnan().any()
    am = exact.argmax(-1)
    # exact at the winner in both; coarse (INT4) elsewhere: close to exact, not equal
    torch.testing.assert_close(full.cpu().double().gather(1, am[:, None]), exact.gather(1, am[:, None]), rtol=1e-5, atol=1e-5)
    _assert_coarse_logits(head, x, w, full)
    finite = only.isfinite()
    assert finite.sum(-1).max() <= 16 or mode == "certified"
    assert (only.cpu().argmax(-1) == am).all()
    torch.testing.assert_close(only[finite].cpu().double(), exact[finite.cpu()], rtol=1e-5, atol=1e-5)


def _assert_coarse_logits(head, x, weight, full):
    """Every logit of ``full`` is either exact (a reranked token) or the coarse logit: equal to the
    fp64 coarse dot ``x . w~`` within the coarse pass's fp32 rounding, and within the certified
    deterministic bound of the exact logit.

    Tolerances (derived, see lowbit/ops/coarse_head/reference.py): the coarse pass sums
    ``sum_g s_g (sum x q - z sum x)`` in fp32, each term at most ``s_g qmax |x_k|``, two per
    element, so its rounding error is at most ``eps * D`` with ``eps = rounding_eps(bits, depth)``
    and ``D = 0.5 sum_g s_g ||x_g||_1`` (the INTx error bound); the exact fp32 logits are within
    ``gamma(K) sum |x||w|`` of the fp64 ones. The tensor-core routes multiply ``x`` rounded to
    fp16 (their own bound covers it): ``|x.w~ - x~.w~| <= 2^-11 sum |x||w~|`` more. Fast mode's
    int8 tensor-core route quantizes x per row (``x_int8.py``: within ``amax_k |x| / 254`` per
    element), adding ``amax |x| / 254 * sum |w~|``. All are <= ~0.01 here, while a coarse logit set
    to 0 or halved is off by ~|c| ~ 0.1."""
    from lowbit.ops.coarse_head.reference import gamma, reference_depth, rounding_eps

    p = head.packing
    xd = x.cpu().double().reshape(-1, K)
    unit = 2.0**p.coarse_exp
    wt = p.fmt.dequantize(torch.float64).cpu() * unit  # the coarse rows, in the weight's units
    coarse = xd @ wt.t()
    s = p.fmt.scale.cpu().double() * unit  # [N, NG]
    ng = s.shape[1]
    l1 = torch.nn.functional.pad(xd.abs(), (0, ng * p.group_size - K)).view(-1, ng, p.group_size).sum(-1)
    d = 0.5 * l1 @ s.t()  # the INTx error bound D: |x.w - x.w~| <= D
    eps = rounding_eps(p.bits, reference_depth(K, ng), split_x=True)
    wd = _dense(weight).double().cpu()
    exact = xd @ wd.t()
    exact_tol = gamma(K) * (xd.abs() @ wd.abs().t()) + 1e-30
    got = full.cpu().double().reshape(-1, head.n)
    is_exact = (got - exact).abs() <= exact_tol
    x_fp16 = 2.0**-11 * (xd.abs() @ wt.abs().t())
    if head.mode == "fast":
        x_fp16 = x_fp16 + (xd.abs().amax(-1, keepdim=True) / 254) * wt.abs().sum(-1)
    is_coarse = (got - coarse).abs() <= eps * d + x_fp16 + 1e-30
    assert (is_exact | is_coarse).all()
    assert ((got - exact).abs() <= d * (1 + eps) + x_fp16 + exact_tol).all()  # the certified bound
    assert is_coarse.sum() >= got.numel() // 2  # most tokens are not reranked: the check has teeth


def test_lazy_quantization_and_version(backend):
    w = torch.zeros(N, K, dtype=torch.bfloat16, device=backend.device)
    with backend.active():
        head = DraftHead(w, bits=8, block=64)
        assert head.packing is None
        x = torch.randn(M, K, dtype=torch.bfloat16, device=backend.device)
        with pytest.raises(ValueError, match="all zeros"):
            head.argmax(x)
        real, _ = _case("random")
        w.copy_(real.to(backend.device))  # loaded after construction (a shared head)
        _assert_exact(head, x, w)
        first = head.packing
        assert first is not None
        w.mul_(-1.0)  # an in-place update re-quantizes
        _assert_exact(head, x, w)
        assert head.packing is not first


def test_shared_packing():
    w, _ = _case("random")
    a = DraftHead(w, bits=4, mode="fast")
    b = DraftHead(w, bits=4, mode="certified")
    c = DraftHead(w, bits=8)
    assert a.packing is b.packing and c.packing is not a.packing
    assert a.weight is w  # the original is kept by reference, not copied


@pytest.mark.parametrize("bad", ["x_k", "x_dtype", "k0", "k_big", "k_float", "bits", "native_dense", "group",
                                 "mode", "kcand", "block", "fp8_block", "weight_k", "fast_k"])
def test_value_errors(bad):
    w, x = _case("random")
    kw = dict(bits=4, block=64)
    if bad in ("bits", "native_dense", "group", "mode", "kcand", "block", "fp8_block", "weight_k"):
        if bad == "bits":
            kw["bits"] = 3
        elif bad == "native_dense":
            kw["bits"] = None
        elif bad == "group":
            kw["group_size"] = 40
        elif bad == "mode":
            kw["mode"] = "exact"
        elif bad == "kcand":
            kw["kcand"] = 65
        elif bad == "block":
            kw["block"] = 96
        elif bad == "fp8_block":
            w = FP8.quantize(w.float(), "block")
        elif bad == "weight_k":
            w = w[:, :40]
        with pytest.raises(ValueError):
            DraftHead(w, **kw)
        return
    head = DraftHead(w, mode="fast" if bad == "fast_k" else "certified", kcand=1, **kw)
    with pytest.raises(ValueError):
        if bad == "x_k":
            head.argmax(x[:, :64])
        elif bad == "x_dtype":
            head.argmax(x.double())
        elif bad == "k0":
            head.topk(x, 0)
        elif bad == "k_big":
            head.topk(x, N + 1)
        elif bad == "k_float":
            head.topk(x, 2.0)
        elif bad == "fast_k":
            head.topk(x, 6)  # 5 blocks x kcand 1 = 5 candidates: top-6 cannot be answered


def _graph_replays_match_eager(head, x, k, xs):
    """Capture ``head.argmax`` and ``head.topk(·, k)`` on a static copy of ``x`` in one CUDA graph,
    replay it on each of ``xs`` copied in, and assert every replay equals the eager calls on that
    input. Returns the replays' (argmax, topk values, topk indices), cloned."""
    static_x = x.clone()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_a = head.argmax(static_x)
        static_v, static_i = head.topk(static_x, k)
    out = []
    for trial, x2 in enumerate(xs):
        static_x.copy_(x2)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(static_a, head.argmax(x2)), trial
        e_v, e_i = head.topk(x2, k)
        assert torch.equal(static_i, e_i) and torch.equal(static_v, e_v), trial
        out.append((static_a.clone(), static_v.clone(), static_i.clone()))
    return out


@pytest.mark.cuda
def test_compile_and_cuda_graph_fast():
    w, x = _case("random")
    w, x = w.cuda(), x.cuda()
    head = DraftHead(w, bits=2, group_size=64, mode="fast", kcand=4, rerank=16)
    head.warmup(max_m=M)
    ref = head.argmax(x)
    compiled = torch.compile(head.argmax, fullgraph=True)
    assert torch.equal(compiled(x), ref)
    static_x = x.clone()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = head.argmax(static_x)
    x2 = torch.randn_like(x)
    static_x.copy_(x2)
    graph.replay()
    assert torch.equal(static_out, head.argmax(x2))


@pytest.mark.cuda
@pytest.mark.parametrize("fmt", ["fp8", "nvfp4"])
@pytest.mark.parametrize("bits", [None, 4])
def test_cuda_graph_fast_quantized_weights(fmt, bits):
    """Fast mode over an FP8-row / NVFP4 weight (its own rows as the coarse copy, or an INT4 copy of
    it) has no host synchronization either: argmax and topk replay in a CUDA graph with fresh x and
    give the eager answers. Such heads take the torch selection and the gathered_dot rescoring of
    the stored rows, not the dense weights' fused select + rerank kernels."""
    w, x = _case("random")
    weight = FP8.quantize(w.float(), "row") if fmt == "fp8" else NVFP4.quantize(w.float())
    weight, x = weight.to("cuda"), x.cuda()
    head = DraftHead(weight, bits=bits, mode="fast", kcand=4, rerank=16, block=64)
    head.warmup(max_m=M)
    xs = [torch.randn_like(x) for _ in range(2)]
    for x2, (_, v, i) in zip(xs, _graph_replays_match_eager(head, x, 4, xs)):
        # the rescored values are the stored rows' exact logits
        torch.testing.assert_close(v.double().cpu(), _exact64(x2, weight).gather(1, i.cpu()), rtol=1e-5, atol=1e-5)


@pytest.mark.cuda
@pytest.mark.parametrize("m", [1, 16, 33, 64, 100])
def test_certified_exact_bands_cuda(m):
    """Every M band's launch configuration, a realistic K, bf16 and fp32 x."""
    w = (torch.randn(4000, 576, device="cuda") * 0.02).bfloat16()
    for dtype in (torch.bfloat16, torch.float32):
        x = torch.randn(m, 576, device="cuda", dtype=dtype)
        head = DraftHead(w, bits=8, rerank=256)
        exact = x.double() @ w.double().t()
        ref_v, ref_i = _topk64(exact.cpu(), 4)
        assert torch.equal(head.argmax(x).cpu(), ref_i[:, 0])
        v, i = head.topk(x, 4)
        assert torch.equal(i.cpu(), ref_i)


@pytest.mark.cuda
def test_compile_and_cuda_graph_fused_argmax(monkeypatch):
    """The fused certified argmax compiles fullgraph and replays in a CUDA graph with new inputs,
    rows that tie everywhere (the in-launch rescoring) included; the statistics count replays."""
    monkeypatch.setattr(_dispatch, "FUSED_ARGMAX_MIN_M", DEFAULT_FUSED_MIN_M)
    g = torch.Generator().manual_seed(3)
    w = (torch.randn(3000, 576, generator=g) * 0.02)
    w[2000:] = w[2000]  # a tied tail: rows of x along it tie across many blocks
    w = w.bfloat16().cuda()
    m = 32
    head = DraftHead(w, mode="certified")
    head.warmup(max_m=m, ks=(1,))
    x = torch.randn(m, 576, device="cuda").bfloat16()
    ref = head.argmax(x)
    assert head._state.norms is not None
    assert torch.equal(torch.compile(head.argmax, fullgraph=True)(x), ref)
    static_x = x.clone()
    head.reset_stats()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_a = head.argmax(static_x)
    for trial in range(3):
        x2 = torch.randn_like(x)
        if trial == 2:
            x2[: m // 2] = w[2000].expand(m // 2, -1) * 100  # the tied tail wins: ties everywhere
        static_x.copy_(x2)
        graph.replay()
        exact = (x2.double() @ w.double().t()).cpu()
        want = exact.argsort(dim=-1, descending=True, stable=True)[:, 0]
        assert torch.equal(static_a.cpu(), want)
        assert torch.equal(head.argmax(x2), static_a)
    st = head.stats
    assert st["calls"] == 6 and st["rows"] == 6 * m and st["fallbacks"] >= m, st


@pytest.mark.cuda
def test_compile_and_cuda_graph_certified():
    """Certified argmax / top-k on a dense weight are sync-free: fullgraph compile, and CUDA-graph
    capture + replay with new inputs (fallback rows included) agree with eager; the device
    statistics count the replays."""
    w, x = _case("random")
    eq, _ = _case("all_equal")
    w = torch.cat([w, eq]).cuda()  # the all-equal tail never wins; random rows stay exact
    x = x.cuda()
    head = DraftHead(w, bits=8, group_size=32, mode="certified", kcand=4, rerank=64, block=64)
    head.warmup(max_m=M, ks=(1, 5))
    ref_a, (ref_v, ref_i) = head.argmax(x), head.topk(x, 5)
    compiled = torch.compile(head.argmax, fullgraph=True)
    assert torch.equal(compiled(x), ref_a)
    compiled_topk = torch.compile(head.topk, fullgraph=True)
    cv, ci = compiled_topk(x, 5)
    assert torch.equal(ci, ref_i) and torch.equal(cv, ref_v)
    head.reset_stats()
    # the last trial's rows tie everywhere: the fallback kernel inside the graph
    xs = [torch.randn_like(x), torch.randn_like(x), eq[:1].expand(M, K).to(x)]
    _, static_v, static_i = _graph_replays_match_eager(head, x, 5, xs)[-1]
    x2 = xs[-1]
    exact = x2.double() @ w.double().t()
    ref = exact.cpu().argsort(dim=-1, descending=True, stable=True)[:, :5]
    assert torch.equal(static_i.cpu(), ref)
    st = head.stats
    # 3 replays of 2 calls + 3 x 2 eager calls; the tied trial falls back on every row of its 4 calls
    assert st["calls"] == 12 and st["rows"] == 12 * M and st["fallbacks"] + st["wide"] >= 4 * M, st


@pytest.mark.parametrize("mode", ["certified", "fast"])
def test_topk_of_one_gives_values(backend, mode):
    """``topk(x, 1)`` returns the exact best value and its index (argmax alone may skip the values)."""
    w, x = _case("random")
    w, x = w.to(backend.device), x.to(backend.device)
    with backend.active():
        head = DraftHead(w, mode=mode)
        v, i = head.topk(x, 1)
        am = head.argmax(x)
    ref_v, ref_i = _topk64(_exact64(x, w), 1)
    assert v.shape == (M, 1) and torch.equal(i.cpu(), ref_i) and torch.equal(am.cpu(), ref_i[:, 0])
    torch.testing.assert_close(v.cpu().double(), ref_v, rtol=1e-5, atol=1e-5)


def _huge_entry_case():
    """The issue's head: one 1e8 entry makes the INT8 group scale (range / 255) overflow fp16."""
    g = torch.Generator().manual_seed(49)
    w = torch.randn(256, 64, generator=g) * 0.02
    w[10, 3] = 1e8
    x = torch.randn(4, 64, generator=g)
    x[:, 3] = x[:, 3].abs()
    return w, x


@pytest.mark.parametrize("bits", [2, 4, 8])
def test_certified_exact_with_entries_beyond_fp16_scales(backend, bits):
    w, x = _huge_entry_case()
    w[200, 5] = -3e7  # a second overflowing group, negative
    w, x = w.to(backend.device), x.to(backend.device)
    with backend.active():
        head = DraftHead(w, bits=bits, group_size=16, block=64)
        am = head.argmax(x)
        v, i = head.topk(x, 5)
        logits = head.logits(x)
    exact = x.double().cpu() @ w.double().cpu().t()
    ref_v, ref_i = _topk64(exact, 5)
    assert head.packing.coarse_exp > 0
    assert torch.isfinite(head.packing.fmt.scale.float()).all()
    assert torch.equal(am.cpu(), ref_i[:, 0]) and torch.equal(i.cpu(), ref_i)
    torch.testing.assert_close(v.cpu().double(), ref_v, rtol=1e-6, atol=0)
    # the coarse logits come back in the weight's units: 2^e times the scaled coarse pass
    from lowbit.ops.coarse_head.reference import coarse_values_reference
    p = head.packing
    c, _ = coarse_values_reference(x.cpu(), p.fmt.dequantize().cpu() * 2.0**p.coarse_exp, None, bits=bits,
                                   group_size=16, bound=0, sigma=4.0)
    # the reranked (exact) entries differ from c; every other one equals c up to fp32 rounding of
    # the coarse dot (the kernels sum in another order: gamma_K-sized) and, on the tensor-core
    # routes, x rounded to fp16 (2^-11 relative): << the 2^e factor a missing scale-back would show
    ok = (logits.cpu() - c).abs() <= 2.0**-10 * (x.abs().cpu() @ (p.fmt.dequantize().abs().cpu() * 2.0**p.coarse_exp).t()) + 1e-6
    ok |= (logits.cpu().double() - exact).abs() <= 1e-6 * exact.abs() + 1e-6
    assert ok.all()


def test_issue_example_default_head():
    w, x = _huge_entry_case()
    head = lowbit.DraftHead(w)
    assert torch.equal(head.argmax(x), (x.double() @ w.double().t()).argmax(-1))


@pytest.mark.parametrize("where", ["dense_nan", "dense_inf", "fp8_nan", "fp8_scale_inf", "nvfp4_gs_inf",
                                   "nvfp4_scale_nan"])
def test_non_finite_weights_refused(where):
    w, x = _case("random", torch.float32)
    if where.startswith("dense"):
        w[7, 9] = float("nan") if where == "dense_nan" else float("inf")
        with pytest.raises(ValueError, match=r"non-finite.*\(7, 9\)"):
            DraftHead(w, bits=8)
        return
    if where.startswith("fp8"):
        weight = FP8.quantize(w, "row")
        if where == "fp8_nan":
            weight.data.view(torch.uint8)[7, 9] = 0x7F
        else:
            weight.scale[7, 0] = float("inf")
    else:
        weight = NVFP4.quantize(w)
        if where == "nvfp4_gs_inf":
            weight.global_scale.fill_(float("inf"))
        else:
            weight.scale.view(torch.uint8)[7, 2] = 0x7F
    for bits in (None, 8):
        with pytest.raises(ValueError, match="non-finite"):
            DraftHead(weight, bits=bits)


@pytest.mark.parametrize("kw", [dict(bits=8.0), dict(bits=True), dict(kcand=True), dict(kcand=4.0),
                                dict(rerank=True), dict(group_size=64.0), dict(block=64.0), dict(sigma=float("nan")),
                                dict(sigma=True)])
def test_constructor_type_errors_are_value_errors(kw):
    w, _ = _case("random")
    name = next(iter(kw))
    with pytest.raises(ValueError, match=name):
        DraftHead(w, **kw)


def test_public_coarse_head_op_scales_back(backend):
    """lowbit.ops.coarse_head.coarse_head returns the weight's units: 2^coarse_exp times the
    prescaled pass (exactly: a power of two), the candidates unchanged."""
    from lowbit.ops.coarse_head import BOUND_DET, coarse_head
    from lowbit.ops.coarse_head.coarse import coarse_head_scaled

    w, x = _huge_entry_case()
    w, x = w.to(backend.device), x.to(backend.device)
    with backend.active():
        head = DraftHead(w, bits=8, group_size=16, block=64)
        p = head.packing
        out = coarse_head(x, p, block=64, kcand=4, bound=BOUND_DET, write_logits=True)
        raw = coarse_head_scaled(x, p, block=64, kcand=4, bound=BOUND_DET, write_logits=True)
    assert p.coarse_exp > 0
    f = 2.0**p.coarse_exp
    for a, b in zip(out, raw):
        assert torch.equal(a, b * f if a.is_floating_point() else b)
    # in the weight's units: the coarse logit of the 1e8 token is ~ x[:, 3] * 1e8
    torch.testing.assert_close(out.logits[:, 10].cpu().double(), (x.double() @ w.double().t())[:, 10].cpu(),
                               rtol=1e-3, atol=0)


def test_certified_sizes_grow_with_k_only_when_unset():
    from lowbit.ops.coarse_head.pipeline import certified_sizes

    w = torch.randn(512, 64)
    grown = DraftHead(w)._config
    assert [certified_sizes(grown, k) for k in (1, 2, 4, 16, 64)] == [(4, 128), (8, 128), (8, 128), (8, 256),
                                                                       (8, 1024)]
    assert certified_sizes(DraftHead(w, block=256)._config, 16) == (16, 256)
    assert certified_sizes(DraftHead(w, block=16)._config, 16) == (4, 256)
    assert certified_sizes(DraftHead(w, kcand=4, rerank=64)._config, 16) == (4, 64)  # set: kept as given
    assert certified_sizes(DraftHead(w, kcand=4)._config, 16) == (4, 256)


def test_certified_topk_sized_for_k_and_block_rescans(backend):
    """The 16 best tokens planted in one block of 128: with 4 candidates a block that block hides
    members and is rescored whole (a "rescan", no whole-row pass), as with the default (8 for
    k = 16); 16 a block certify the row from its candidates. Planted over 3 blocks with 1 candidate a block, more
    blocks hide members than are rescanned: the row is scored in full. Exact every way."""
    gen = torch.Generator().manual_seed(3)
    w = torch.randn(1024, K, generator=gen) * 0.02
    x = torch.randn(2, K, generator=gen)
    w[256:272] = x[0] / x[0].norm() * torch.linspace(2.0, 1.0, 16)[:, None]  # rows 256..271, one block
    w, x = w.to(backend.device), x.to(backend.device)
    got = {}
    for name, kw in (("k4", dict(kcand=4, rerank=128)), ("default", {}), ("k16", dict(kcand=16, rerank=256))):
        with backend.active():
            head = DraftHead(w, bits=8, group_size=32, **kw)
            _assert_exact(head, x, w, k=16)
        got[name] = head.stats
    assert got["k4"]["fallbacks"] == 0 and got["k4"]["rescans"] >= 1, got
    assert got["default"]["fallbacks"] == 0 and got["default"]["rescans"] >= 1, got
    assert got["k16"]["fallbacks"] == got["k16"]["rescans"] == 0, got
    w3 = w.clone()
    for b in (1, 4, 6):  # 3 planted tokens in each of 3 blocks
        w3[128 * b: 128 * b + 3] = (x[0] / x[0].norm() * torch.tensor([2.0, 1.9, 1.8], device=w.device)[:, None]).to(w.dtype)
    with backend.active():
        head = DraftHead(w3, bits=8, group_size=32, kcand=1, rerank=128)
        _assert_exact(head, x, w3, k=9)
    assert head.stats["fallbacks"] >= 1, head.stats


@pytest.mark.parametrize("fmt", ["dense", "fp8"])
def test_capturable_matches_the_tail_taken(backend, fmt):
    """``capturable(k)`` is true exactly where the certified call keeps its statistics on the
    device (no host synchronization): dense weights up to CERTIFIED_MAX_K, never FP8 rows."""
    _triton_only(backend)
    from lowbit.ops.coarse_head import CERTIFIED_MAX_K

    w, x = _case("random")
    w, x = w.to(backend.device), x.to(backend.device)
    weight = w if fmt == "dense" else FP8.quantize(w, "row")
    for k in (1, 5, CERTIFIED_MAX_K + 1):
        with backend.active():
            head = DraftHead(weight, bits=8, group_size=32, mode="certified", kcand=8, rerank=256, block=64)
            head.argmax(x) if k == 1 else head.topk(x, k)
        assert head.capturable(k) is (head._stats.device is not None) is (fmt == "dense" and k <= CERTIFIED_MAX_K)
    fast = DraftHead(w, bits=8, mode="fast")
    assert fast.capturable() and fast.capturable(4)
    for bad in (0, w.shape[0] + 1, 2.0, True):
        with pytest.raises(ValueError, match="k must be"):
            head.capturable(bad)
