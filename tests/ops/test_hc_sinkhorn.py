"""lowbit.ops.hc_split_sinkhorn: hyper-connection split + Sinkhorn, on every tier.

Tolerance: everything is fp32 and the reference is fp64; a sigmoid/exp costs a few ulp and each
of the 2 * iters normalisations one division and an hc-term sum, so after 20 iterations the
error stays near 1e-6 absolute (measured ~2e-7); we allow 2e-5 on values of order 1.
"""
from __future__ import annotations

import pytest
import torch

import lowbit
from lowbit.ops.hc_sinkhorn import hc_split_sinkhorn
from lowbit.ops.hc_sinkhorn.reference import hc_split_sinkhorn_reference

ATOL = 2e-5


@pytest.fixture
def poison_empty(monkeypatch):
    """Every float buffer the op allocates starts as NaN, so an unwritten element fails."""
    real_empty = torch.empty

    def nan_empty(*args, **kwargs):
        t = real_empty(*args, **kwargs)
        if t.is_floating_point():
            t.fill_(float("nan"))
        return t

    monkeypatch.setattr(torch, "empty", nan_empty)


def make_inputs(b, s, hc, device):
    width = (2 + hc) * hc
    mixes = torch.randn(b, s, width, device=device)
    hc_scale = torch.rand(3, device=device) + 0.5
    hc_base = torch.randn(width, device=device) * 0.5
    return mixes, hc_scale, hc_base


def run(backend, *args, **kwargs):
    with backend.active():
        return hc_split_sinkhorn(*args, **kwargs)


def check_close(out, mixes, hc_scale, hc_base, hc, iters, eps):
    ref = hc_split_sinkhorn_reference(mixes.double(), hc_scale.double(), hc_base.double(), hc, iters, eps)
    for name, a, r in zip(("pre", "post", "comb"), out, ref):
        assert a.dtype == torch.float32 and a.shape == r.shape, name
        assert not a.isnan().any(), name
        err = (a.double().cpu() - r.cpu()).abs().max().item()
        assert err < ATOL, f"{name}: max abs error {err}"


def test_reference_pins_the_formula():
    """One row by hand: pre, post, and the first softmax + column step (iters = 1)."""
    hc, eps = 2, 1e-3
    mixes = torch.arange(8, dtype=torch.float64).view(1, 1, 8) / 8
    scale = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    base = torch.linspace(-1, 1, 8, dtype=torch.float64)
    pre, post, comb = hc_split_sinkhorn_reference(mixes, scale, base, hc, 1, eps)
    x = mixes[0, 0]
    assert torch.allclose(pre[0, 0], torch.sigmoid(x[:2] + base[:2]) + eps)
    assert torch.allclose(post[0, 0], 2 * torch.sigmoid(2 * x[2:4] + base[2:4]))
    c = (3 * x[4:] + base[4:]).view(2, 2)  # row-major: c[i, j] = x[4 + 2i + j]
    c = torch.exp(c) / torch.exp(c).sum(1, keepdim=True) + eps
    c = c / (c.sum(0, keepdim=True) + eps)
    assert torch.allclose(comb[0, 0], c)


@pytest.mark.parametrize("hc, iters", [(4, 20), (4, 1), (4, 2), (1, 3), (3, 7), (8, 5)])
def test_matches_fp64_reference(backend, poison_empty, hc, iters):
    mixes, hc_scale, hc_base = make_inputs(2, 37, hc, backend.device)
    out = run(backend, mixes, hc_scale, hc_base, hc_mult=hc, sinkhorn_iters=iters, eps=1e-6)
    check_close(out, mixes, hc_scale, hc_base, hc, iters, 1e-6)


def test_strided_mixes(backend, poison_empty):
    big = torch.randn(3, 20, 30, device=backend.device)
    mixes = big[:, ::2, 3:27]  # [3, 10, 24], non-contiguous rows
    _, hc_scale, hc_base = make_inputs(1, 1, 4, backend.device)
    out = run(backend, mixes, hc_scale, hc_base)
    check_close(out, mixes, hc_scale, hc_base, 4, 20, 1e-6)


def test_comb_becomes_doubly_stochastic(backend):
    mixes, hc_scale, hc_base = make_inputs(2, 9, 4, backend.device)
    row_dev = []
    for iters in (1, 3, 10, 30):
        _, _, comb = run(backend, mixes, hc_scale, hc_base, sinkhorn_iters=iters)
        comb = comb.double().cpu()
        assert (comb > 0).all()
        # the last step is a column normalisation: columns sum to colsum / (colsum + eps)
        assert (comb.sum(-2) - 1).abs().max() < 1e-5
        row_dev.append((comb.sum(-1) - 1).abs().max().item())
    assert all(a >= b for a, b in zip(row_dev, row_dev[1:])), row_dev
    assert row_dev[0] > 1e-3 and row_dev[-1] < 1e-4, row_dev


def test_inputs_not_mutated(backend):
    mixes, hc_scale, hc_base = make_inputs(2, 5, 4, backend.device)
    before = [t.clone() for t in (mixes, hc_scale, hc_base)]
    run(backend, mixes, hc_scale, hc_base)
    for a, b in zip(before, (mixes, hc_scale, hc_base)):
        assert torch.equal(a, b)


def test_empty_rows(backend):
    mixes, hc_scale, hc_base = make_inputs(2, 0, 4, backend.device)
    pre, post, comb = run(backend, mixes, hc_scale, hc_base)
    assert pre.shape == (2, 0, 4) and post.shape == (2, 0, 4) and comb.shape == (2, 0, 4, 4)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(mixes=torch.zeros(2, 3, 23)), r"\(2\+hc\)\*hc=24"),
        (dict(mixes=torch.zeros(2, 3, 24, dtype=torch.bfloat16)), "mixes has dtype"),
        (dict(mixes=torch.zeros(6, 24)), "mixes must have 3 dims"),
        (dict(hc_scale=torch.zeros(2)), r"hc_scale must be \[3\]"),
        (dict(hc_base=torch.zeros(23)), r"hc_base must be \[24\]"),
        (dict(sinkhorn_iters=0), "sinkhorn_iters"),
        (dict(hc_mult=0), "hc_mult"),
        (dict(eps=-1.0), "eps"),
    ],
)
def test_validation(kwargs, match):
    mixes, hc_scale, hc_base = make_inputs(2, 3, 4, "cpu")
    args = dict(mixes=mixes, hc_scale=hc_scale, hc_base=hc_base, hc_mult=4, sinkhorn_iters=20, eps=1e-6)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        hc_split_sinkhorn(**args)


def test_opcheck_and_compile_cpu():
    mixes, hc_scale, hc_base = make_inputs(2, 3, 4, "cpu")
    with lowbit.backend("reference"):
        torch.library.opcheck(torch.ops.lowbit.hc_split_sinkhorn.default, (mixes, hc_scale, hc_base, 4, 20, 1e-6))
        compiled = torch.compile(hc_split_sinkhorn, fullgraph=True, backend="aot_eager")
        for a, b in zip(compiled(mixes, hc_scale, hc_base), hc_split_sinkhorn(mixes, hc_scale, hc_base)):
            assert torch.equal(a, b)


# ---- GPU tier -------------------------------------------------------------------------------------

@pytest.mark.cuda
def test_cuda_large(poison_empty):
    mixes, hc_scale, hc_base = make_inputs(4, 4096 + 3, 4, "cuda")
    check_close(hc_split_sinkhorn(mixes, hc_scale, hc_base), mixes, hc_scale, hc_base, 4, 20, 1e-6)


@pytest.mark.cuda
def test_cuda_compile_opcheck_graph():
    mixes, hc_scale, hc_base = make_inputs(2, 100, 4, "cuda")
    torch.library.opcheck(torch.ops.lowbit.hc_split_sinkhorn.default, (mixes, hc_scale, hc_base, 4, 20, 1e-6))
    compiled = torch.compile(hc_split_sinkhorn, fullgraph=True)
    check_close(compiled(mixes, hc_scale, hc_base), mixes, hc_scale, hc_base, 4, 20, 1e-6)

    hc_split_sinkhorn(mixes, hc_scale, hc_base)  # compile the kernel outside capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = hc_split_sinkhorn(mixes, hc_scale, hc_base)
    new = make_inputs(2, 100, 4, "cuda")
    for dst, src in zip((mixes, hc_scale, hc_base), new):
        dst.copy_(src)
    graph.replay()
    torch.cuda.synchronize()
    check_close(out, *new, 4, 20, 1e-6)
