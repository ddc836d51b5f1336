"""lowbit.ops.sparse_attn: top-k sparse MQA attention with a sink, on every tier.

Results are checked against :func:`oracle`, an fp64 definition written here (a per-query loop
over the valid rows; it shares no code with ``sparse_attn_reference``), element by element with
the bound :func:`check` derives:

With w_j the exact weights and A[d] = sum_j w_j |v_j[d]| (v_j = kv[idx_j]), the kernel's inputs
are the same bf16 values the oracle reads, and its error comes from
* the softmax weights rounded to bf16 before the PV product (tensor cores take bf16): each
  weight within u = 2^-8 relative (bf16: 8 significant bits, round to nearest) -> <= u * A[d];
  the denominator is summed from the unrounded fp32 weights;
* the output rounded to bf16: <= u * |o[d]| <= u * A[d];
* fp32 scores: they accumulate d products in fp32, |delta s| <= d 2^-24 S with
  S = scale * sum_i |q_i k_i|, which moves the weights by a factor <= e^(2 |delta s|): a
  2.5 d 2^-24 S_max * A[d] term (2.5 > 2 covers e^x - 1 <= 1.25 x for x < 0.4, and the fp32
  exp2 / division, ~2^-22 relative);
* a weight below fp32's range (sink 200: e^-190) flushes to 0: an absolute 1e-30.
So |out - o| <= (2u + 2.5 d 2^-24 S_max) A + 1e-30. The reference tier (fp32 softmax, one bf16
rounding of the output) is inside the same bound. The interpreter tier: Triton 3.6's interpreter
casts fp32 -> bf16 by truncation (round toward zero, up to 2u relative; the GPU rounds to
nearest), so there both roundings count 2u: 4u instead of 2u (``_TIER``). FP8 kv: the kernel rounds the decoded rows to bf16 once,
which adds u * A[d] for the values and moves each score by <= u * S_j, the weights by a factor
<= e^(2 u S_max): + (u + e^(2 u S_max) - 1) * A[d]. (The previous Frobenius TOL = 2e-2 let a
1.5% scaling of the output pass; this bound does not.)
"""
from __future__ import annotations

import math

import pytest
import torch

import lowbit
from lowbit.formats.fp8 import FP8
from lowbit.ops.sparse_attn import sparse_attn
from lowbit.ops.sparse_attn.reference import sparse_attn_reference
from tests._helpers import rel_err

U = 2.0**-8  # bf16 unit roundoff


def make_inputs(b, m, h, d, n, topk, device, *, idx_dtype=torch.int32, invalid=0.2, fp8_group=None):
    q = torch.randn(b, m, h, d, device=device).to(torch.bfloat16)
    kv = (torch.randn(b, n, d, device=device) * 2).to(torch.bfloat16)
    sink = torch.randn(h, device=device)
    idx = torch.randint(0, n, (b, m, topk), device=device)
    idx = torch.where(torch.rand(b, m, topk, device=device) < invalid, torch.full_like(idx, -1), idx).to(idx_dtype)
    kv_scale = None
    if fp8_group is not None:
        fmt = FP8.quantize(kv, "group", fp8_group)
        kv, kv_scale = fmt.data, fmt.scale
    return q, kv, sink, idx, kv_scale


def oracle(q, kv, sink, idx, scale, kv_scale=None):
    """Independent fp64 definition. Returns ``(o, A, S)``: the output [b, m, h, d], the weighted
    magnitudes A = sum_j w_j |v_j| [b, m, h, d], and S_max = max_j scale * sum_i |q_i k_ji| (for
    the FP8 bound). Rows: kv[b, j] for each listed j in [0, n) (every occurrence counts); FP8 rows
    decoded as e4m3 value x group scale in fp64. A query with no valid row gives 0; a +inf sink
    gives 0; a NaN sink NaN on queries with a valid row."""
    b, m, h, d = q.shape
    n = kv.shape[1]
    q64 = q.detach().cpu().double()
    kv64 = kv.detach().cpu().to(torch.float32).double()
    if kv_scale is not None:
        g = d // kv_scale.shape[-1]
        kv64 = kv64 * kv_scale.detach().cpu().double().repeat_interleave(g, dim=-1)
    sink64 = sink.detach().cpu().double()
    o = torch.zeros(b, m, h, d, dtype=torch.float64)
    amag = torch.zeros(b, m, h, d, dtype=torch.float64)
    neg = torch.zeros(b, m, h, d, dtype=torch.float64)
    s_max = 0.0
    for ib in range(b):
        for im in range(m):
            js = [j for j in idx[ib, im].tolist() if 0 <= j < n]
            if not js or h == 0:
                continue
            rows = kv64[ib, js]  # [t, d]
            rows_abs, rows_neg = rows.abs(), (-rows).clamp(min=0)
            qh = q64[ib, im]  # [h, d]: every head at once
            sc = scale * (qh @ rows.t())  # [h, t]
            s_max = max(s_max, float((scale * (qh.abs() @ rows_abs.t())).max()))
            # a NaN sink gives NaN, a +inf sink zeros (set below); both enter the softmax as -inf
            sk = torch.where(torch.isnan(sink64) | (sink64 == float("inf")), float("-inf"), sink64)
            c = torch.maximum(sc.max(dim=1).values, sk)  # [h]
            e = torch.exp(sc - c[:, None])
            w = e / (e.sum(dim=1) + torch.exp(sk - c))[:, None]
            live = torch.isfinite(sink64) | (sink64 == float("-inf"))
            o[ib, im] = torch.where(live[:, None], w @ rows, 0.0)
            o[ib, im, torch.isnan(sink64)] = float("nan")
            amag[ib, im] = torch.where(live[:, None], w @ rows_abs, 0.0)
            neg[ib, im] = torch.where(live[:, None], w @ rows_neg, 0.0)
    oracle.neg = neg  # sum_j w_j max(-v_j, 0): the one-sided interpreter bound uses it
    return o, amag, s_max


_TIER = {"name": "cuda"}


@pytest.fixture(autouse=True)
def _record_tier(request):
    """Which tier the running test checks (the interpreter's bf16 casts truncate: see the doc)."""
    _TIER["name"] = request.getfixturevalue("backend").name if "backend" in request.fixturenames else "cuda"


def check(out, q, kv, sink, idx, scale, kv_scale=None):
    """``out`` within the derived bound of the oracle, element by element (see the module doc)."""
    o, amag, s_max = oracle(q, kv, sink, idx, scale, kv_scale)
    u = 2 * U if _TIER["name"] == "interpret" else U  # one bf16 cast: RNE u, truncation 2u
    bound = (2 * u + 2.5 * q.shape[-1] * 2.0**-24 * s_max) * amag + 1e-30
    if kv_scale is not None:
        bound = bound + (u + math.expm1(2 * u * s_max)) * amag
    out64 = out.detach().cpu().double()
    assert out64.shape == o.shape
    assert torch.equal(out64.isnan(), o.isnan()), "NaN pattern differs from the oracle"
    err = (out64 - o).abs().nan_to_num(0.0)
    ratio = (err / bound).max().item() if err.numel() else 0.0
    assert (err <= bound).all(), f"error exceeds the derived bound by x{ratio:.3g}"
    if _TIER["name"] == "interpret" and kv_scale is None:
        # Truncation only shrinks: the bf16 weights are <= the exact ones, so before the output
        # cast pre - o lies in [-2u P, 2u N] (P, N = sum w_j max(+-v_j, 0)), and the cast moves
        # toward zero by <= 2u |pre|. Signed: out - o <= 2u N + 2u max(-pre, 0) and
        # out - o >= -2u P - 2u max(pre, 0), |pre| <= |o| + 2u A; plus the fp32 terms. This
        # one-sided form is what catches an output scaled up by 1.5% on this tier.
        neg = oracle.neg
        pos = amag - neg
        o = o.nan_to_num(0.0)  # NaN positions were matched above
        fp32 = 2.5 * q.shape[-1] * 2.0**-24 * s_max * amag + 1e-30
        hi = 2 * U * neg + 2 * U * ((-o).clamp(min=0) + 2 * U * amag) + fp32
        lo = -(2 * U * pos + 2 * U * (o.clamp(min=0) + 2 * U * amag) + fp32)
        diff = (out64 - o).nan_to_num(0.0)
        assert (diff <= hi).all() and (diff >= lo).all(), "outside the one-sided (truncating) bound"
    return ratio


def run(backend, *args, **kwargs):
    with backend.active():
        return sparse_attn(*args, **kwargs)


def naive(q, kv, sink, idx, scale):
    """Loop-level definition, independent of the reference's softmax-with-extra-column form."""
    b, m, h, d = q.shape
    out = torch.zeros(b, m, h, d, dtype=torch.float64)
    for ib in range(b):
        for im in range(m):
            rows = [kv[ib, j].double() for j in idx[ib, im].tolist() if 0 <= j < kv.shape[1]]
            for ih in range(h):
                qv = q[ib, im, ih].double()
                w = [math.exp(scale * float(qv @ r)) for r in rows]
                denom = sum(w) + math.exp(float(sink[ih]))
                for wj, r in zip(w, rows):
                    out[ib, im, ih] += wj / denom * r
    return out


def test_reference_matches_naive_definition():
    q, kv, sink, idx, _ = make_inputs(2, 2, 3, 16, 20, 7, "cpu")
    ref = sparse_attn_reference(q.double(), kv.double(), sink.double(), idx, 0.3)
    assert rel_err(ref, naive(q, kv, sink, idx, 0.3)) < 1e-12


@pytest.mark.parametrize("h", [1, 16, 64, 128])
@pytest.mark.parametrize("idx_dtype", [torch.int32, torch.int64])
def test_matches_fp64_reference(backend, poison_empty, h, idx_dtype):
    q, kv, sink, idx, _ = make_inputs(2, 3, h, 64, 50, 24, backend.device, idx_dtype=idx_dtype)
    out = run(backend, q, kv, sink, idx, 64**-0.5)
    assert out.shape == q.shape and out.dtype == torch.bfloat16
    assert not out.isnan().any()
    check(out, q, kv, sink, idx, 64**-0.5)


@pytest.mark.parametrize("d, topk", [(48, 100), (80, 37), (16, 1)])
def test_awkward_shapes(backend, poison_empty, d, topk):
    """d not a power of two, topk not a multiple of the tile (and crossing one), topk = 1."""
    q, kv, sink, idx, _ = make_inputs(1, 2, 5, d, 60, topk, backend.device)
    out = run(backend, q, kv, sink, idx, 0.2)
    check(out, q, kv, sink, idx, 0.2)


def test_strided_inputs(backend, poison_empty):
    """q as a transposed view, indices as a strided slice: the kernel honours strides."""
    dev = backend.device
    q = torch.randn(2, 4, 3, 32, device=dev).to(torch.bfloat16).transpose(1, 2)  # [b, m=3, h=4, d]
    kv = torch.randn(2, 40, 64, device=dev).to(torch.bfloat16)[:, :, ::2]
    idx = torch.randint(-1, 40, (2, 3, 40), device=dev, dtype=torch.int32)[:, :, ::2]
    sink = torch.randn(4, device=dev)
    out = run(backend, q, kv, sink, idx, 0.25)
    check(out, q, kv, sink, idx, 0.25)


@pytest.mark.parametrize("sink_value", [0.0, float("-inf"), 200.0])
def test_all_invalid_rows_give_zeros(backend, poison_empty, sink_value):
    q, kv, sink, idx, _ = make_inputs(2, 3, 4, 64, 50, 24, backend.device)
    sink = torch.full_like(sink, sink_value)
    idx[0, 1] = -1
    idx[1, 2, :5] = kv.shape[1]  # past the end: treated as "no row" like -1
    idx[1, 2, 5:] = -1
    out = run(backend, q, kv, sink, idx, 0.125)
    assert not out.isnan().any()
    assert (out[0, 1] == 0).all() and (out[1, 2] == 0).all()
    check(out, q, kv, sink, idx, 0.125)
    if sink_value < 100:
        assert out[0, 0].abs().sum() > 0
    else:  # a sink of 200 drowns every row: weights ~e^-190, below bf16's range
        assert (out == 0).all()


def test_duplicate_indices_each_count(backend, poison_empty):
    q, kv, sink, _, _ = make_inputs(1, 2, 4, 64, 50, 24, backend.device)
    idx = torch.tensor([[[3] * 12 + [7] * 6 + [-1] * 6, [5, 5] + [-1] * 22]], device=backend.device, dtype=torch.int32)
    out = run(backend, q, kv, sink, idx, 0.1)
    check(out, q, kv, sink, idx, 0.1)
    # two copies of one row, no sink: weights 1/2 + 1/2, the output is that row
    out = run(backend, q, kv, torch.full_like(sink, float("-inf")), idx, 0.1)
    assert rel_err(out[0, 1], kv[0, 5].double().expand(4, 64)) < 4e-3  # one bf16 rounding of the row


def test_minus_inf_sink_is_plain_softmax(backend, poison_empty):
    q, kv, _, idx, _ = make_inputs(2, 2, 8, 64, 50, 24, backend.device, invalid=0.0)
    sink = torch.full((8,), float("-inf"), device=backend.device)
    out = run(backend, q, kv, sink, idx, 0.1)
    check(out, q, kv, sink, idx, 0.1)


def test_sink_lowers_the_weights(backend, poison_empty):
    """A finite sink only scales the output by sum(e^s) / (sum(e^s) + e^sink) per head."""
    q, kv, _, idx, _ = make_inputs(1, 1, 4, 64, 50, 24, backend.device, invalid=0.0)
    no_sink = run(backend, q, kv, torch.full((4,), float("-inf"), device=backend.device), idx, 0.1)
    sink = torch.tensor([-2.0, 0.0, 1.0, 3.0], device=backend.device)
    out = run(backend, q, kv, sink, idx, 0.1)
    check(out, q, kv, sink, idx, 0.1)
    check(no_sink, q, kv, torch.full((4,), float("-inf")), idx, 0.1)
    # the factor itself: both outputs are within ~2.01u A of exact (check's bound; A >= 0 the
    # no-sink magnitudes, the sink only shrinks them); scaled by factor <= 1, the difference is
    # within twice that
    rows = kv[0, idx[0, 0].long()].double().cpu()
    lse = torch.logsumexp(q[0, 0].double().cpu() @ rows.T * 0.1, dim=-1)  # [h]
    factor = torch.sigmoid(lse - sink.double().cpu())
    _, amag, _ = oracle(q, kv, torch.full((4,), float("-inf")), idx, 0.1)
    diff = (out[0, 0].double().cpu() - no_sink[0, 0].double().cpu() * factor[:, None]).abs()
    u = 2 * U if _TIER["name"] == "interpret" else U
    assert (diff <= 2 * (2 * u + 2.0**-12) * amag[0, 0] + 1e-30).all()  # 2^-12 >> 2.5 d 2^-24 S


@pytest.mark.parametrize("group", [64, 128])
def test_fp8_kv(backend, poison_empty, group):
    q, kv8, sink, idx, kv_scale = make_inputs(2, 2, 16, 128, 50, 40, backend.device, fp8_group=group)
    out = run(backend, q, kv8, sink, idx, 128**-0.5, kv_scale=kv_scale)
    check(out, q, kv8, sink, idx, 128**-0.5, kv_scale=kv_scale)


def test_inputs_not_mutated(backend):
    q, kv, sink, idx, _ = make_inputs(1, 2, 4, 32, 30, 20, backend.device)
    before = [t.clone() for t in (q, kv, sink, idx)]
    run(backend, q, kv, sink, idx, 0.2)
    for a, b in zip(before, (q, kv, sink, idx)):
        assert torch.equal(a, b)


@pytest.mark.parametrize("splits", [2, 3, 5])
def test_split_topk_path(backend, poison_empty, splits):
    """Split the top-k list across programs and merge (the small-batch decode path)."""
    if not backend.is_triton:
        pytest.skip("the split path is a Triton launch detail; the reference has no splits")
    from lowbit.ops.sparse_attn.triton import sparse_attn_triton

    q, kv, sink, idx, _ = make_inputs(1, 2, 16, 64, 80, 300, backend.device)
    idx[0, 1] = -1
    idx[0, 0, :130] = -1  # the first splits of row 0 see no valid index
    out = sparse_attn_triton(q, kv, sink, idx, 0.1, num_splits=splits)
    assert not out.isnan().any() and (out[0, 1] == 0).all()
    check(out, q, kv, sink, idx, 0.1)
    sink_inf = torch.full_like(sink, float("-inf"))
    out = sparse_attn_triton(q, kv, sink_inf, idx, 0.1, num_splits=splits)
    assert (out[0, 1] == 0).all()
    check(out, q, kv, sink_inf, idx, 0.1)


@pytest.mark.parametrize("combine", [(1, 64, 1), (1, 16, 1), (2, 32, 1), (4, 64, 2)])
def test_merge_kernel_tiles(backend, poison_empty, combine):
    """The merge kernel's tile (COMBINE_H heads x COMBINE_D dims, COMBINE_WARPS): the small-regime
    default is 1 x 128 on one warp; d = 64 here, so 16 and 32 split it into several programs."""
    if not backend.is_triton:
        pytest.skip("the merge kernel is a Triton launch detail; the reference has no splits")
    from lowbit.ops.sparse_attn.triton import sparse_attn_triton

    ch, cd, cw = combine
    q, kv, sink, idx, _ = make_inputs(1, 2, 6, 64, 80, 150, backend.device)
    idx[0, 1] = -1
    cfg = dict(BLOCK_H=16, BLOCK_N=16, num_warps=4, num_stages=1, SPLITS=3, COMBINE_H=ch, COMBINE_D=cd,
               COMBINE_WARPS=cw)
    out = sparse_attn_triton(q, kv, sink, idx, 0.1, config=cfg)
    assert (out[0, 1] == 0).all()
    check(out, q, kv, sink, idx, 0.1)


def test_empty_topk_gives_zeros(backend):
    q, kv, sink, idx, _ = make_inputs(1, 2, 4, 32, 30, 0, backend.device)
    out = run(backend, q, kv, sink, idx, 0.2)
    assert out.shape == q.shape and (out == 0).all()


def test_module_attribute_stays_callable():
    """``lowbit.ops.sparse_attn`` is both the package and the function."""
    q, kv, sink, idx, _ = make_inputs(1, 1, 2, 16, 10, 4, "cpu")
    with lowbit.backend("reference"):
        out = lowbit.ops.sparse_attn(q, kv, sink, idx, 0.5)
    assert torch.equal(out, sparse_attn(q, kv, sink, idx, 0.5))


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda a: a.update(topk_idxs=a["topk_idxs"].to(torch.int16)), "topk_idxs has dtype"),
        (lambda a: a.update(q=a["q"].float()), "q has dtype"),
        (lambda a: a.update(q=torch.zeros(1, 2, 4, 576, dtype=torch.bfloat16),
                            kv=torch.zeros(1, 30, 576, dtype=torch.bfloat16)), "head dim d=576"),
        (lambda a: a.update(attn_sink=torch.zeros(5)), r"attn_sink must be \[h=4\]"),
        (lambda a: a.update(attn_sink=torch.zeros(4, dtype=torch.bfloat16)), "attn_sink has dtype"),
        (lambda a: a.update(kv=torch.zeros(2, 30, 32, dtype=torch.bfloat16)), "kv must be"),
        (lambda a: a.update(topk_idxs=torch.zeros(1, 3, 8, dtype=torch.int32)), "topk_idxs must be"),
        (lambda a: a.update(kv=a["kv"].to(torch.float8_e4m3fn)), "pass its group scales"),
        (lambda a: a.update(kv=a["kv"].to(torch.float8_e4m3fn), kv_scale=torch.ones(1, 30, 3)), "kv_scale must be"),
        (lambda a: a.update(kv_scale=torch.ones(1, 30, 1)), "only for a float8_e4m3fn kv"),
        (lambda a: a.update(softmax_scale=torch.tensor(0.5)), "softmax_scale must be"),
    ],
)
def test_validation(mutate, match):
    q, kv, sink, idx, _ = make_inputs(1, 2, 4, 32, 30, 8, "cpu")
    args = dict(q=q, kv=kv, attn_sink=sink, topk_idxs=idx, softmax_scale=0.1)
    mutate(args)
    with pytest.raises(ValueError, match=match):
        sparse_attn(**args)


def test_opcheck_and_compile_cpu():
    """Schema, fake tensor and tracing checks on the reference path (the GPU tier repeats them)."""
    q, kv, sink, idx, _ = make_inputs(1, 2, 4, 32, 30, 8, "cpu")
    with lowbit.backend("reference"):
        torch.library.opcheck(torch.ops.lowbit.sparse_attn.default, (q, kv, sink, idx, 0.1, None))
        compiled = torch.compile(sparse_attn, fullgraph=True, backend="aot_eager")
        assert torch.equal(compiled(q, kv, sink, idx, 0.1), sparse_attn(q, kv, sink, idx, 0.1))


# ---- GPU tier: DeepSeek-sized shapes, compile, opcheck, CUDA graphs -------------------------------

@pytest.mark.cuda
@pytest.mark.parametrize("b, m, h, topk", [(1, 1, 64, 2048), (2, 2, 128, 2048), (4, 1, 128, 1000), (1, 64, 64, 512), (3, 1, 16, 777)])
@pytest.mark.parametrize("fp8", [False, True])
def test_cuda_large(poison_empty, b, m, h, topk, fp8):
    d, n = 512, 8192
    q, kv, sink, idx, kv_scale = make_inputs(b, m, h, d, n, topk, "cuda", fp8_group=64 if fp8 else None)
    out = sparse_attn(q, kv, sink, idx, d**-0.5, kv_scale=kv_scale)
    check(out, q, kv, sink, idx, d**-0.5, kv_scale)


@pytest.mark.cuda
def test_cuda_compile_opcheck_graph():
    d = 512
    q, kv, sink, idx, _ = make_inputs(2, 1, 64, d, 4096, 1024, "cuda")
    torch.library.opcheck(torch.ops.lowbit.sparse_attn.default, (q, kv, sink, idx, d**-0.5, None))
    compiled = torch.compile(sparse_attn, fullgraph=True)
    check(compiled(q, kv, sink, idx, d**-0.5), q, kv, sink, idx, d**-0.5)

    sparse_attn(q, kv, sink, idx, d**-0.5)  # compile the kernels outside capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = sparse_attn(q, kv, sink, idx, d**-0.5)
    q2, kv2, sink2, idx2, _ = make_inputs(2, 1, 64, d, 4096, 1024, "cuda")
    for dst, src in zip((q, kv, sink, idx), (q2, kv2, sink2, idx2)):
        dst.copy_(src)
    graph.replay()
    torch.cuda.synchronize()
    check(out, q2, kv2, sink2, idx2, d**-0.5)


# ---- the split path on hard inputs, every tier that runs Triton --------------------------------

def _split_cfg(splits, block_h=16, block_n=16):
    return dict(BLOCK_H=block_h, BLOCK_N=block_n, num_warps=4, num_stages=1, SPLITS=splits)


def _split_inputs(h, fp8, device):
    # topk 250 = 16 tiles of 16 (the last one partial): 2, 3, 16 splits give 2, 3, 16 programs
    q, kv, sink, idx, kv_scale = make_inputs(1, 2, h, 64, 80, 250, device, fp8_group=64 if fp8 else None)
    idx[0, 1] = -1  # a row with no valid index
    idx[0, 0, :130] = -1  # the first splits of row 0 see no valid index
    idx[0, 0, 200:240] = 7  # duplicates, each counts
    return q, kv, sink, idx, kv_scale


@pytest.mark.parametrize("splits", [2, 3, 16])
@pytest.mark.parametrize("h", [1, 16, 64])
@pytest.mark.parametrize("fp8", [False, True])
def test_split_merge_hard_inputs(backend, poison_empty, splits, h, fp8):
    """Split top-k lists merged by the second kernel: splits that see no valid index, a row with
    none at all, duplicates, two head blocks (h = 64), with a finite and a -inf sink."""
    if not backend.is_triton:
        pytest.skip("the split is a Triton launch detail; the reference has no splits")
    from lowbit.ops.sparse_attn import triton as sk

    q, kv, sink, idx, kv_scale = _split_inputs(h, fp8, backend.device)
    cfg = _split_cfg(splits, block_h=32) if h == 64 else _split_cfg(splits)
    for s in (sink, torch.full_like(sink, float("-inf"))):
        out = sk.sparse_attn_triton(q, kv, s, idx, 0.1, kv_scale, config=cfg)
        assert not out.isnan().any() and (out[0, 1] == 0).all()
        check(out, q, kv, s, idx, 0.1, kv_scale)


@pytest.mark.cuda
@pytest.mark.parametrize("splits", [8, 16, 32])
@pytest.mark.parametrize("fp8", [False, True])
@pytest.mark.parametrize("b, h, topk", [(1, 64, 2048), (2, 128, 2048), (1, 64, 777)])
def test_cuda_split_merge_large(poison_empty, splits, fp8, b, h, topk):
    from lowbit.ops.sparse_attn.triton import sparse_attn_triton

    d = 512
    q, kv, sink, idx, kv_scale = make_inputs(b, 1, h, d, 8192, topk, "cuda", fp8_group=64 if fp8 else None)
    cfg = dict(BLOCK_H=16, BLOCK_N=64, num_warps=4, num_stages=2, SPLITS=splits)
    for _ in range(2):
        out = sparse_attn_triton(q, kv, sink, idx, d**-0.5, kv_scale, config=cfg)
        check(out, q, kv, sink, idx, d**-0.5, kv_scale)


@pytest.mark.cuda
def test_cuda_split_merge_graph():
    """The split path captured in a CUDA graph and replayed with new inputs."""
    from lowbit.ops.sparse_attn import triton as sk

    d = 512
    cfg = dict(BLOCK_H=16, BLOCK_N=64, num_warps=4, num_stages=2, SPLITS=16)
    q, kv, sink, idx, _ = make_inputs(1, 1, 64, d, 4096, 2048, "cuda")
    sk.sparse_attn_triton(q, kv, sink, idx, d**-0.5, config=cfg)  # compile outside capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = sk.sparse_attn_triton(q, kv, sink, idx, d**-0.5, config=cfg)
    for seed in (1, 2):
        torch.manual_seed(seed)
        new = make_inputs(1, 1, 64, d, 4096, 2048, "cuda")
        for dst, src in zip((q, kv, sink, idx), new[:4]):
            dst.copy_(src)
        graph.replay()
        torch.cuda.synchronize()
        check(out, q, kv, sink, idx, d**-0.5)


# ---- edge semantics shared by every backend (issue #49 items 4 and 6) ---------------------------

def test_non_finite_sinks_same_on_every_tier(backend, poison_empty):
    """NaN sink: NaN on queries with a valid index, zeros on a query with none; +inf: zeros;
    -inf: no sink. Checked against the oracle's definition, NaN pattern included."""
    q, kv, _, idx, _ = make_inputs(2, 3, 4, 32, 30, 10, backend.device)
    sink = torch.tensor([float("nan"), 0.3, float("inf"), float("-inf")], device=backend.device)
    idx[0, 1] = -1
    idx[1, 2] = kv.shape[1]  # past the end: no row either
    out = run(backend, q, kv, sink, idx, 0.2)
    check(out, q, kv, sink, idx, 0.2)
    assert (out[0, 1] == 0).all() and (out[1, 2] == 0).all()  # no valid index: zeros, NaN sink included
    assert out[0, 0, 0].isnan().all() and out[1, 1, 0].isnan().all()
    assert (out[:, :, 2] == 0).all()  # +inf sink
    assert not out[:, :, 1:].isnan().any()


@pytest.mark.parametrize("scale", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_softmax_scale_refused(backend, scale):
    q, kv, sink, idx, _ = make_inputs(1, 2, 2, 16, 10, 4, backend.device)
    with pytest.raises(ValueError, match="softmax_scale must be finite"):
        run(backend, q, kv, sink, idx, scale)


@pytest.mark.parametrize("b, m, h, n, topk", [(0, 2, 2, 10, 4), (1, 0, 2, 10, 4), (1, 2, 0, 10, 4),
                                               (1, 2, 2, 0, 4), (1, 2, 2, 10, 0), (2, 3, 2, 0, 0)])
def test_empty_dims(backend, poison_empty, b, m, h, n, topk):
    """Any of b, m, h, n, topk = 0: the documented shape; n = 0 or topk = 0 leave no valid index,
    so every query is zeros (the reference used to raise IndexError for n = 0)."""
    dev = backend.device
    q = torch.randn(b, m, h, 16, device=dev).to(torch.bfloat16)
    kv = torch.randn(b, n, 16, device=dev).to(torch.bfloat16)
    idx = torch.full((b, m, topk), -1, dtype=torch.int32, device=dev)
    if n:
        idx.random_(0, n)
    out = run(backend, q, kv, torch.zeros(h, device=dev), idx, 0.25)
    assert out.shape == q.shape and out.dtype == q.dtype
    check(out, q, kv, torch.zeros(h), idx, 0.25)
    if n == 0 or topk == 0:
        assert (out == 0).all()


def test_zero_head_dim_refused(backend):
    q = torch.randn(1, 2, 2, 0).to(torch.bfloat16)
    with pytest.raises(ValueError, match="head dim d=0"):
        run(backend, q.to(backend.device), torch.zeros(1, 4, 0, dtype=torch.bfloat16, device=backend.device),
            torch.zeros(2, device=backend.device), torch.zeros(1, 2, 3, dtype=torch.int32, device=backend.device), 0.5)
