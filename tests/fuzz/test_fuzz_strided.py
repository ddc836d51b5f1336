"""Every public op on non-contiguous inputs: the same values laid out differently give the same
result, and nothing outside an op's documented outputs is written.

Layouts (drawn per tensor argument): contiguous; every other element of the last dim (inner stride
2); every other row (outer stride 2); column-major (the last two dims transposed in memory); and a
contiguous view one element into its storage (a misaligned data pointer). The elements a view skips
hold random bytes (NaN patterns included), so an op that reads or writes the wrong element fails.

Oracle: the op on contiguous copies of the same values, on the same tier, which the fp64-oracle
fuzz tests of ``tests/fuzz/test_fuzz_ops`` check: the results must be bit-identical (NaN-aware).
Two exceptions agree within 2^-6 (norm-wise) instead, far below what reading a wrong element
costs: on the cuda tier a misaligned pointer may route to another kernel, and on the reference
tier PyTorch's sums (matmul, einsum) pick their order by layout. Read-only inputs and their storage must be unchanged
byte for byte; in-place outputs (``act_quant(inplace=True)``, ``fp4_act_quant(inplace=True)``,
``gathered_bias``' logits) must hold the contiguous call's result in the view and the old bytes
everywhere else in their storage.
"""
from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lowbit.ops import (act_quant, fp4_act_quant, fp4_gemm, fp8_gemm, gathered_bias, gathered_dot, gathered_rows,
                        hc_split_sinkhorn, sparse_attn, weight_dequant)
from tests._helpers import rel_err
from tests.fuzz.test_fuzz_ops import FUZZ, KINDS, make_weight, random_e4m3, run

STRIDED = settings(FUZZ, max_examples=6)
LAYOUTS = ["contiguous", "inner2", "outer2", "colmajor", "offset"]


def relayout(t: torch.Tensor, layout: str, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(view with ``t``'s values in ``layout``, the contiguous tensor whose storage it views). Layouts
    a tensor's rank does not allow fall back to ``offset``."""
    if layout == "contiguous":
        v = t.clone()
        return v, v
    if layout in ("colmajor", "outer2") and t.dim() < 2:
        layout = "offset"
    shape = list(t.shape)
    if layout == "colmajor":
        base = t.transpose(-1, -2).contiguous()
        return base.transpose(-1, -2), base
    numel = {"inner2": 2 * t.numel(), "outer2": 2 * t.numel(), "offset": t.numel() + 1}[layout]
    base = torch.randint(0, 256, (numel * t.element_size(),), generator=gen, dtype=torch.uint8).view(t.dtype)
    if layout == "inner2":
        base = base.view(*shape[:-1], 2 * shape[-1])
        v = base[..., ::2]
    elif layout == "outer2":
        base = base.view(2 * shape[0], *shape[1:])
        v = base[::2]
    else:
        v = base[1:].view(shape)
    v.copy_(t)
    assert torch.equal(_bytes(v), _bytes(t))
    return v, base


def _bytes(t: torch.Tensor) -> torch.Tensor:
    """The elements' bytes, in logical order (a fresh contiguous copy: any strides)."""
    return torch.empty(t.shape, dtype=t.dtype, device=t.device).copy_(t).reshape(-1).view(torch.uint8)


def _same(got, want, loose: bool, what: str) -> None:
    """Bit-identical (``loose``: float results within 2^-6 relative, NaN where NaN)."""
    if isinstance(want, (tuple, list)):
        assert len(got) == len(want)
        for i, (g, w) in enumerate(zip(got, want)):
            _same(g, w, loose, f"{what}[{i}]")
        return
    assert got.shape == want.shape and got.dtype == want.dtype, (what, got.shape, want.shape, got.dtype, want.dtype)
    if loose and want.is_floating_point() and want.element_size() >= 2:
        g, w = got.detach().cpu().double(), want.detach().cpu().double()
        assert torch.equal(g.isnan(), w.isnan()), f"{what}: NaN pattern"
        ok = ~w.isnan()
        assert rel_err(g[ok], w[ok]) <= 2.0**-6, f"{what}: off the contiguous call"
        return
    assert torch.equal(_bytes(got.detach().cpu()), _bytes(want.detach().cpu())), f"{what}: differs from the contiguous call"


def check_strided(backend, fn, args: dict, layouts: dict, gen, written: str | None = None, sums: bool = False, **kw):
    """Call ``fn(**args, **kw)`` on contiguous copies and on ``layouts`` of the tensor arguments;
    compare (module docstring). ``written``: the argument the op writes in place, if any. ``sums``:
    the op's reference sums in PyTorch (matmul, einsum, sum), whose order depends on the layout, so
    its float results on the reference tier agree within 2^-6 instead of bit for bit. The
    interpreter's results are bit-identical; on a GPU, Triton specializes a kernel on its strides
    (stride 1, multiples of 16), which changes the loads' vectorization and so the order of a
    reduction's fp32 adds: there a summing op's results agree within 2^-6 too."""
    dev = backend.device

    def fresh(v):
        if isinstance(v, torch.Tensor):
            return v.to(dev, copy=True).contiguous()
        if dataclasses.is_dataclass(v):  # a quantized weight: its tensors
            return type(v)(**{f.name: fresh(getattr(v, f.name)) for f in dataclasses.fields(v)})
        return v

    contig = {k: fresh(v) for k, v in args.items()}
    want = run(backend, fn, **contig, **kw)
    if written is not None:
        want = contig[written]
    views, bases, before = {}, {}, {}

    def lay_out(name, v, layout):
        if isinstance(v, torch.Tensor) and v.dim() >= 1:
            view, base = relayout(v, layout, gen)
            bases[name] = base.to(dev)  # a contiguous tensor: the copy keeps its layout
            before[name] = bases[name].clone()
            return _view_of(bases[name], base, view)
        if dataclasses.is_dataclass(v):  # every tensor of a quantized weight in the weight's layout
            return type(v)(**{f.name: lay_out(f"{name}.{f.name}", getattr(v, f.name), layout)
                              for f in dataclasses.fields(v)})
        return fresh(v)

    for k, v in args.items():
        views[k] = lay_out(k, v, layouts.get(k, "contiguous"))
    got = run(backend, fn, **views, **kw)
    strided = set(layouts.values()) != {"contiguous"}
    loose = dev.type == "cuda" and ("offset" in layouts.values() or sums and strided) or backend.name == "reference" and sums
    for k in before:
        if k == written:
            expect = before[k].clone()
            _view_of(expect, bases[k], views[k]).copy_(want)
            assert torch.equal(_bytes(bases[k]), _bytes(expect)) or loose, f"{k}: storage outside the result changed"
            _same(views[k], want, loose, k)
            got = views[k]
        else:
            assert torch.equal(_bytes(bases[k]), _bytes(before[k])), f"input {k} (or its storage) was written"
    _same(got, want, loose, fn.__name__)


def _view_of(new_base: torch.Tensor, base: torch.Tensor, view: torch.Tensor) -> torch.Tensor:
    """The view of ``new_base`` (a copy of the contiguous ``base``) that ``view`` is of ``base``."""
    offset = view.storage_offset() - base.storage_offset()
    return new_base.as_strided(view.shape, view.stride(), new_base.storage_offset() + offset)


def layouts_for(*names):
    return st.fixed_dictionaries({n: st.sampled_from(LAYOUTS) for n in names})


# -------------------------------------------------------------------------------------- the ops
@STRIDED
@given(lay=layouts_for("x"), lead=st.sampled_from([(3,), (2, 3)]), groups=st.integers(1, 3),
       bs=st.sampled_from([32, 128]), fmt=st.sampled_from([None, "ue8m0"]), inplace=st.booleans(),
       xdt=st.sampled_from([torch.float32, torch.bfloat16]), seed=st.integers(0, 2**31 - 1))
def test_act_quant_strided(backend, lay, lead, groups, bs, fmt, inplace, xdt, seed):
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(*lead, groups * bs, generator=gen) * 5).to(xdt)
    check_strided(backend, act_quant, dict(x=x), lay, gen, written="x" if inplace else None,
                  block_size=bs, scale_fmt=fmt, inplace=inplace)


@STRIDED
@given(lay=layouts_for("x"), lead=st.sampled_from([(3,), (2, 3)]), groups=st.integers(1, 3),
       fmt=st.sampled_from(["ue8m0", "e4m3"]), inplace=st.booleans(),
       xdt=st.sampled_from([torch.float32, torch.bfloat16]), seed=st.integers(0, 2**31 - 1))
def test_fp4_act_quant_strided(backend, lay, lead, groups, fmt, inplace, xdt, seed):
    gen = torch.Generator().manual_seed(seed)
    bs = 32 if fmt == "ue8m0" else 16
    x = (torch.randn(*lead, groups * bs, generator=gen) * 5).to(xdt)
    check_strided(backend, fp4_act_quant, dict(x=x), lay, gen, written="x" if inplace else None,
                  block_size=bs, scale_fmt=fmt, inplace=inplace)


@STRIDED
@given(lay=layouts_for("w", "s"), n=st.integers(1, 70), k=st.integers(1, 70), bs=st.sampled_from([16, 32, 128]),
       seed=st.integers(0, 2**31 - 1))
def test_weight_dequant_strided(backend, lay, n, k, bs, seed):
    gen = torch.Generator().manual_seed(seed)
    w = random_e4m3((n, k), gen, "cpu")
    s = torch.rand(-(-n // bs), -(-k // bs), generator=gen) + 0.01
    check_strided(backend, weight_dequant, dict(w=w, s=s), lay, gen, block_size=bs)


@STRIDED
@given(lay=layouts_for("a", "a_s", "b", "b_s"), m=st.integers(1, 5), n=st.integers(1, 150), kb=st.integers(1, 2),
       seed=st.integers(0, 2**31 - 1))
def test_fp8_gemm_strided(backend, lay, m, n, kb, seed):
    gen = torch.Generator().manual_seed(seed)
    k = 128 * kb
    a, b = random_e4m3((m, k), gen, "cpu"), random_e4m3((n, k), gen, "cpu")
    a_s = torch.rand(m, kb, generator=gen) * 2.0**-5 + 2.0**-12
    b_s = torch.rand(-(-n // 128), kb, generator=gen) * 2.0**-5 + 2.0**-12
    check_strided(backend, fp8_gemm, dict(a=a, a_s=a_s, b=b, b_s=b_s), lay, gen, sums=True)


@STRIDED
@given(lay=layouts_for("a", "a_s", "b", "b_s"), m=st.integers(1, 5), n=st.integers(1, 150), kb=st.integers(1, 2),
       seed=st.integers(0, 2**31 - 1))
def test_fp4_gemm_strided(backend, lay, m, n, kb, seed):
    gen = torch.Generator().manual_seed(seed)
    k = 128 * kb
    a = random_e4m3((m, k), gen, "cpu")
    b = torch.randint(0, 256, (n, k // 2), generator=gen).to(torch.uint8)
    b_s = torch.randint(117, 131, (n, k // 32), generator=gen).to(torch.uint8)
    a_s = torch.rand(m, kb, generator=gen) * 2.0**-5 + 2.0**-12
    check_strided(backend, fp4_gemm, dict(a=a, a_s=a_s, b=b, b_s=b_s), lay, gen, sums=True)


@STRIDED
@given(lay=layouts_for("x", "weight", "index", "values", "logits"), b=st.integers(1, 3), t=st.integers(1, 6),
       v=st.integers(6, 40), groups=st.integers(1, 3), kind=st.sampled_from(KINDS), seed=st.integers(0, 2**31 - 1))
def test_gathered_strided(backend, lay, b, t, v, groups, kind, seed):
    """Dense weights (any dtype) and every quantized format, whose tensors (codes, scales) all take
    the weight's layout."""
    gen = torch.Generator().manual_seed(seed)
    k = 32 * groups + (7 if kind in ("fp32", "bf16", "fp16", "fp8") else 0)  # odd K where the format allows
    x = torch.randn(b, k, generator=gen).to(torch.bfloat16)
    w = make_weight(kind, v, k, gen, 1.0)
    idx = torch.stack([torch.randperm(v, generator=gen)[:t] for _ in range(b)])  # distinct per row (bias)
    values = torch.randn(b, t, generator=gen)
    logits = torch.randn(b, v, generator=gen).to(torch.bfloat16)
    check_strided(backend, gathered_dot, dict(x=x, weight=w, index=idx), lay, gen, sums=True)
    check_strided(backend, gathered_rows, dict(weight=w, index=idx), lay, gen, dtype=torch.float32)
    check_strided(backend, gathered_bias, dict(x=x, weight=w, values=values, index=idx, logits=logits), lay, gen,
                  written="logits", sums=True, alpha=0.5)


@STRIDED
@given(lay=layouts_for("q", "kv", "attn_sink", "topk_idxs"), b=st.integers(1, 2), m=st.integers(1, 3),
       h=st.integers(1, 4), d=st.sampled_from([16, 33, 64]), n=st.integers(1, 20), topk=st.integers(1, 12),
       seed=st.integers(0, 2**31 - 1))
def test_sparse_attn_strided(backend, lay, b, m, h, d, n, topk, seed):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(b, m, h, d, generator=gen).to(torch.bfloat16)
    kv = torch.randn(b, n, d, generator=gen).to(torch.bfloat16)
    sink = torch.randn(h, generator=gen)
    idx = torch.randint(-1, n, (b, m, topk), generator=gen, dtype=torch.int32)
    check_strided(backend, sparse_attn, dict(q=q, kv=kv, attn_sink=sink, topk_idxs=idx), lay, gen, sums=True,
                  softmax_scale=1 / math.sqrt(d))


def test_sparse_attn_strided_sink(backend):
    """A strided ``attn_sink`` (every other element of a wider tensor) gives the contiguous call's
    result (the Triton kernels read ``attn_sink[h]`` at offset h: the launcher makes it contiguous)."""
    gen = torch.Generator().manual_seed(1)
    b, m, h, d, n, topk = 1, 2, 3, 16, 5, 4
    q = torch.randn(b, m, h, d, generator=gen).to(torch.bfloat16)
    kv = torch.randn(b, n, d, generator=gen).to(torch.bfloat16)
    idx = torch.randint(0, n, (b, m, topk), generator=gen, dtype=torch.int32)
    check_strided(backend, sparse_attn, dict(q=q, kv=kv, attn_sink=torch.randn(h, generator=gen) * 3, topk_idxs=idx),
                  {"attn_sink": "inner2"}, gen, sums=True, softmax_scale=0.25)


@STRIDED
@given(lay=layouts_for("mixes", "hc_scale", "hc_base"), b=st.integers(1, 2), s=st.integers(1, 4), hc=st.integers(1, 4),
       seed=st.integers(0, 2**31 - 1))
def test_hc_split_sinkhorn_strided(backend, lay, b, s, hc, seed):
    gen = torch.Generator().manual_seed(seed)
    width = (2 + hc) * hc
    args = dict(mixes=torch.randn(b, s, width, generator=gen), hc_scale=torch.rand(3, generator=gen) + 0.5,
                hc_base=torch.randn(width, generator=gen) * 0.5)
    check_strided(backend, hc_split_sinkhorn, args, lay, gen, sums=True, hc_mult=hc, sinkhorn_iters=5, eps=1e-6)


def test_relayout_views_are_what_they_claim():
    """The helper itself: each layout gives the same values, with the strides it names."""
    gen = torch.Generator().manual_seed(0)
    t = torch.randn(3, 8, generator=gen)
    for layout in LAYOUTS:
        v, base = relayout(t, layout, gen)
        assert torch.equal(v, t)
        contiguous = v.is_contiguous()
        assert contiguous == (layout in ("contiguous", "offset")), layout
        if layout == "offset":
            assert v.storage_offset() == 1
    assert relayout(t, "inner2", gen)[0].stride() == (16, 2)
    assert relayout(t, "outer2", gen)[0].stride() == (16, 1)
    assert relayout(t, "colmajor", gen)[0].stride() == (1, 3)
