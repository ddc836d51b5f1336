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


# hc = 4 launch configs (the table's first) and the eps that select the kernel's forms: 1e-6 the
# fast reciprocal and the scaling vectors, 1e-9 the fast reciprocal alone, 0 neither. The
# interpreter runs the fast reciprocal's formulas with plain division (no inline PTX); the cuda
# tier checks the rcp.approx numerics against the same tolerance.
HC4_CONFIGS = [None, dict(BLOCK_R=64, num_warps=2), dict(BLOCK_R=128, num_warps=4), dict(BLOCK_R=32, num_warps=1)]


def _config_id(cfg):
    return "-".join(f"{k}={v}" for k, v in cfg.items()) if cfg else "table"


@pytest.mark.parametrize("eps", [1e-6, 1e-9, 0.0])
@pytest.mark.parametrize("cfg", HC4_CONFIGS, ids=_config_id)
def test_hc4_configs(backend, poison_empty, cfg, eps):
    """Every launch config and form against the fp64 reference, on contiguous rows (2 x 37:
    partial last programs; flat addressing with the strides compiled in, 16-byte loads) and on
    strided rows (a flat runtime stride, scalar loads)."""
    if not backend.is_triton:
        pytest.skip("launch configurations exist on the Triton tiers only")
    from lowbit.ops.hc_sinkhorn.triton import hc_split_sinkhorn_triton

    mixes, hc_scale, hc_base = make_inputs(2, 37, 4, backend.device)
    out = hc_split_sinkhorn_triton(mixes, hc_scale, hc_base, 4, 20, eps, config=cfg)
    check_close(out, mixes, hc_scale, hc_base, 4, 20, eps)
    strided = torch.randn(3, 20, 30, device=backend.device)[:, ::2, 3:27]
    out = hc_split_sinkhorn_triton(strided, hc_scale, hc_base, 4, 3, eps, config=cfg)
    check_close(out, strided, hc_scale, hc_base, 4, 3, eps)


@pytest.mark.parametrize("eps", [1e-6, 1e-8, 1e-9])
@pytest.mark.filterwarnings("ignore:overflow encountered in exp2")  # the fast sigmoid: 1 / (1 + inf) = 0
def test_hc4_extreme_logits(backend, eps):
    """Logits of +-100: near-one-hot softmax rows, K entries down to eps, slow Sinkhorn; the scaling
    vectors span ~1/eps (eps = 1e-8 is the smallest eps that runs them; 1e-9 runs the plain form)."""
    if not backend.is_triton:
        pytest.skip("launch configurations exist on the Triton tiers only")
    from lowbit.ops.hc_sinkhorn.triton import hc_split_sinkhorn_triton

    mixes, hc_scale, hc_base = make_inputs(1, 40, 4, backend.device)
    mixes = mixes * 50
    out = hc_split_sinkhorn_triton(mixes, hc_scale, hc_base, 4, 20, eps)
    check_close(out, mixes, hc_scale, hc_base, 4, 20, eps)


def test_hc4_launch_resolution():
    """What the launcher compiles for a config: row addressing and 16-byte loads by layout, the
    eps guards of the fast reciprocal and the scaling vectors, partial and unknown keys."""
    from lowbit.ops.hc_sinkhorn.triton import _SCALED_MIN_EPS, HC4_CONFIG, hc4_launch

    contiguous = torch.empty(2, 5, 24, device="meta")
    br, kw, strides = hc4_launch(dict(BLOCK_R=64), contiguous, 1e-6)
    assert (br, kw["ROW_ADDR"], kw["VEC_LOAD"], strides) == (64, 2, True, (120, 24, 1))
    strided = torch.empty(3, 20, 30, device="meta")[:, ::2, 3:27]  # batch stride = s * row stride
    _, kw, strides = hc4_launch(None, strided, 1e-6)
    assert (kw["ROW_ADDR"], kw["VEC_LOAD"], strides) == (1, False, (600, 60, 1))
    gappy = torch.empty(3, 20, 24, device="meta")[:, :10]  # batch stride 480 != 10 rows
    _, kw, strides = hc4_launch(None, gappy, 1e-6)
    assert (kw["ROW_ADDR"], kw["VEC_LOAD"], strides) == (0, False, (480, 24, 1))
    _, kw, strides = hc4_launch(None, torch.empty(3, 2, 24, device="meta")[:, :1], 1e-6)  # s == 1
    assert (kw["ROW_ADDR"], strides) == (1, (48, 48, 1))
    br, kw, _ = hc4_launch(None, contiguous, 1e-6)
    assert br == HC4_CONFIG["BLOCK_R"] and kw["num_warps"] == HC4_CONFIG["num_warps"]
    assert kw["FAST_RCP"] and kw["SCALED"]
    _, kw, _ = hc4_launch(None, contiguous, _SCALED_MIN_EPS / 2)
    assert kw["FAST_RCP"] and not kw["SCALED"]
    _, kw, _ = hc4_launch(None, contiguous, 0.0)  # no subnormal flush at eps = 0
    assert not kw["FAST_RCP"] and not kw["SCALED"]
    with pytest.raises(ValueError, match="unknown hc=4 config keys"):
        hc4_launch(dict(FAST_RCP=True), contiguous, 1e-6)


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


@pytest.mark.parametrize("b, s", [(0, 3), (2, 0), (0, 0)])
def test_empty_rows(backend, b, s):
    """b = 0 or s = 0: three empty outputs of the documented shapes (issue #49 item 4)."""
    dev = backend.device
    with backend.active():
        pre, post, comb = hc_split_sinkhorn(torch.randn(b, s, 24, device=dev), torch.ones(3, device=dev),
                                            torch.zeros(24, device=dev), 4, 3)
    assert pre.shape == (b, s, 4) and post.shape == (b, s, 4) and comb.shape == (b, s, 4, 4)


@pytest.mark.parametrize("kwargs", [dict(hc_mult=4.0), dict(hc_mult=True), dict(sinkhorn_iters=2.0),
                                    dict(sinkhorn_iters=False), dict(eps="1e-6"), dict(eps=True)])
def test_wrong_scalar_types_are_value_errors(kwargs):
    args = dict(hc_mult=4, sinkhorn_iters=3, eps=1e-6)
    args.update(kwargs)
    with pytest.raises(ValueError):
        hc_split_sinkhorn(torch.randn(1, 2, 24), torch.ones(3), torch.zeros(24), **args)
