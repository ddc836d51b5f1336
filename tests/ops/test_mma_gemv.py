"""The decode-size tensor-core GEMV (``fp8_gemm/mma_gemv.py``) behind fp8_gemm / fp4_gemm at
M <= 16, against an fp64 reference of the dequantized operands (interpreter and cuda tiers)."""
from __future__ import annotations

import pytest
import torch

from lowbit.formats import FP8, MXFP4
from lowbit.ops.fp8_gemm.mma_gemv import MAX_M, MmaGemvConfig, mma_gemv, pick_config
from tests._helpers import poisoned, rel_err
from tests.ops.test_fp4_gemm import _spread_operands

# bf16 output rounding (2^-9 relative per element) dominates: products are exact and the
# accumulation is fp32 (see test_fp8_gemm)
TOL = 2.0**-8

NEEDS_TRITON = "mma_gemv is a Triton kernel (inline PTX on the GPU, emulated under the interpreter): no reference tier"


def _fp4_operands(m, n, k, scale_fmt=None):
    a = FP8.quantize(torch.randn(m, k), "group", 128, scale_fmt=scale_fmt)
    w = torch.randn(n, k) * 0.05
    w[:, :32] *= 300.0  # group scales far apart inside one 128 block
    return a, MXFP4.quantize(w)


def _either_operands(fp4, m, n, k):
    """(a, b, b's codes, b's scales): MXFP4 weights (:func:`_fp4_operands`) or FP8 128 x 128 ones."""
    if fp4:
        a, b = _fp4_operands(m, n, k)
        return a, b, b.packed, b.scale
    a = FP8.quantize(torch.randn(m, k), "group", 128)
    b = FP8.quantize(torch.randn(n, k) * 0.05, "block", 128)
    return a, b, b.data, b.scale


def _run(backend, a, b_data, b_scale, fp4, cfg, e8m0=False, nan_ok=False):
    """``e8m0``: pass the (power-of-two) activation and FP8 weight scales as float8_e8m0fnu;
    ``nan_ok``: the caller checks NaN positions itself (otherwise a NaN is an unwritten output)."""
    dev = backend.device
    out = poisoned((a.data.shape[0], b_data.shape[0]), torch.bfloat16, dev)
    a_s = a.scale.to(torch.float8_e8m0fnu) if e8m0 else a.scale
    if e8m0 and not fp4:
        b_scale = b_scale.to(torch.float8_e8m0fnu)
    with backend.active():
        c = mma_gemv(a.data.to(dev), a_s.to(dev), b_data.to(dev), b_scale.to(dev), fp4=fp4, config=cfg, out=out)
    assert c is out and (nan_ok or not torch.isnan(c).any())
    return c


# (m, n, k, (RT, W[, decode])): one / two column tiles, partial row tiles, K blocks not a multiple of W,
# FP8 scale rows changing inside a program's rows (n = 136), five column tiles (m = 33)
CASES = [(1, 64, 256, (1, 1)), (3, 40, 384, (1, 2)), (8, 33, 128, (2, 1)), (9, 72, 512, (2, 4)),
         (16, 136, 256, (2, 2)), (33, 40, 256, (1, 2))]


@pytest.mark.parametrize("m,n,k,cfg", CASES)
def test_mma_gemv_fp4_vs_fp64(backend, m, n, k, cfg):
    if not backend.is_triton:
        pytest.skip(NEEDS_TRITON)
    a, b = _fp4_operands(m, n, k)
    c = _run(backend, a, b.packed, b.scale, True, cfg)
    assert rel_err(c, a.dequantize(torch.float64) @ b.dequantize(torch.float64).T) < TOL


@pytest.mark.parametrize("m,n,k,cfg", CASES)
def test_mma_gemv_fp8_vs_fp64(backend, m, n, k, cfg):
    if not backend.is_triton:
        pytest.skip(NEEDS_TRITON)
    a = FP8.quantize(torch.randn(m, k), "group", 128)
    b = FP8.quantize(torch.randn(n, k) * torch.logspace(-3, 3, n)[:, None], "block", 128)  # scales per 128 rows differ
    c = _run(backend, a, b.data, b.scale, False, cfg)
    assert rel_err(c, a.dequantize(torch.float64) @ b.dequantize(torch.float64).T) < TOL


def test_mma_gemv_e8m0_scales(backend):
    """UE8M0 activation scales and UE8M0 FP8 weight block scales (float8_e8m0fnu tensors)."""
    if not backend.is_triton:
        pytest.skip(NEEDS_TRITON)
    a, b = _fp4_operands(5, 48, 256, scale_fmt="ue8m0")
    c = _run(backend, a, b.packed, b.scale, True, (1, 2), e8m0=True)
    assert rel_err(c, a.dequantize(torch.float64) @ b.dequantize(torch.float64).T) < TOL
    w8 = FP8.quantize(torch.randn(48, 256), "block", 128, scale_fmt="ue8m0")
    c8 = _run(backend, a, w8.data, w8.scale, False, (1, 2), e8m0=True)
    assert rel_err(c8, a.dequantize(torch.float64) @ w8.dequantize(torch.float64).T) < TOL


def test_mma_gemv_fp4_scale_spread(backend):
    """Group scales 0..12 binades apart inside every 128 block, activations zero on the largest
    group: each MMA covers one group and is scaled on its own, so nothing is lost."""
    if not backend.is_triton:
        pytest.skip(NEEDS_TRITON)
    a, b = _spread_operands(4, 64, 512)
    c = _run(backend, a, b.packed, b.scale, True, (1, 2))
    assert rel_err(c, a.dequantize(torch.float64) @ b.dequantize(torch.float64).T) < TOL


@pytest.mark.parametrize("m,cfg", [(1, (1, 2)), (9, (2, 1))])
def test_mma_gemv_fp4_decodes_agree(backend, m, cfg):
    """Both FP4 decodes (codes straight to fp16 bits, or re-encoded as E4M3 and converted) on a
    weight holding every packed byte value (all 16 codes in both nibbles, -0 included) under
    scales 2^-7..2^7: the same MMAs over the same products up to a power of two, so the GPU gives
    bit-identical results (the interpreter sums each emulated MMA in its own order); both match
    the fp64 reference."""
    if not backend.is_triton:
        pytest.skip(NEEDS_TRITON)
    from lowbit.formats.mxfp4 import MXFP4 as _MX

    n, k = 32, 256  # 4096 packed bytes: every byte value 16 times
    gen = torch.Generator().manual_seed(7)
    packed = (torch.randperm(n * k // 2, generator=gen) % 256).to(torch.uint8).reshape(n, k // 2)
    scale = torch.randint(120, 135, (n, k // 32), generator=gen).to(torch.uint8)
    b = _MX(packed, scale)
    a = FP8.quantize(torch.randn(m, k, generator=gen), "group", 128)
    ref = a.dequantize(torch.float64) @ b.dequantize(torch.float64).T
    dev = backend.device
    outs = {}
    for decode in ("f16", "e4m3"):
        out = poisoned((m, n), torch.bfloat16, dev)
        with backend.active():
            outs[decode] = mma_gemv(a.data.to(dev), a.scale.to(dev), packed.to(dev), scale.to(dev), fp4=True,
                                    config=MmaGemvConfig(*cfg, decode), out=out)
        assert not torch.isnan(outs[decode]).any()
        assert rel_err(outs[decode], ref) < TOL
    if backend.name == "cuda":
        assert torch.equal(outs["f16"], outs["e4m3"])
    with pytest.raises(ValueError, match="decode must be one of"):
        mma_gemv(a.data, a.scale, packed, scale, fp4=True, config=MmaGemvConfig(1, 2, "bf16"))


def test_mma_gemv_checks():
    a = FP8.quantize(torch.randn(MAX_M + 1, 128), "group", 128)
    b = FP8.quantize(torch.randn(16, 128), "block", 128)
    with pytest.raises(ValueError, match=f"M <= {MAX_M}"):
        mma_gemv(a.data, a.scale, b.data, b.scale, fp4=False)
    a1 = FP8.quantize(torch.randn(1, 128), "group", 128)
    with pytest.raises(ValueError, match="rt in"):
        mma_gemv(a1.data, a1.scale, b.data, b.scale, fp4=False, config=(3, 1))
    with pytest.raises(ValueError, match="warps a power of two"):
        mma_gemv(a1.data, a1.scale, b.data, b.scale, fp4=False, config=(1, 3))


@pytest.mark.parametrize("op", ["fp8", "fp4"])
def test_gemm_dispatch_uses_mma_gemv_at_decode_sizes(op):
    """fp8_gemm routes M <= 8 and fp4_gemm M <= 16 through mma_gemv on an sm_89 GPU (and on sm_90
    where the wgmma GEMV does not take them), one row more to other kernels; not under the
    interpreter, not for storage the int32 views cannot read."""
    if op == "fp8":
        from lowbit.ops.fp8_gemm import dispatch

        bound = 8
        kernel = lambda m, **kw: dispatch.route(dispatch.Problem(m, 2112, 7168, kw.pop("arch", (8, 9)), 132, True,  # noqa: E731
                                                                 **kw))[0].kernel
    else:
        from lowbit.ops.fp4_gemm import dispatch

        bound = 16
        kernel = lambda m, **kw: dispatch.route(dispatch.Problem(m, 2112, 7168, kw.pop("arch", (8, 9)), 132,  # noqa: E731
                                                                 kw.pop("aligned", True)))[0].kernel
    assert [kernel(m) for m in (1, bound, bound + 1)] == ["mma_gemv", "mma_gemv", "tiled"]
    assert kernel(1, arch=None) == "tiled" and kernel(1, arch=(8, 0)) == "tiled"
    if op == "fp8":
        assert kernel(1, scales_aligned=False) == "tiled"
    else:
        assert kernel(1, aligned=False) == "tiled"


@pytest.mark.cuda
@pytest.mark.parametrize("op", ["fp8", "fp4"])
def test_cuda_gemm_dispatch_uses_mma_gemv(monkeypatch, op):
    """On the GPU the public ops run mma_gemv where the table says (fp8 M <= 8; fp4 M <= 16 with K
    not a multiple of 512) and agree with fp64."""
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("mma_gemv needs E4M3 (sm_89+)")
    from lowbit.ops.fp4_gemm import fp4_gemm
    from lowbit.ops.fp8_gemm import fp8_gemm
    from lowbit.ops.fp8_gemm import mma_gemv as tm

    calls = []
    real = tm.mma_gemv
    monkeypatch.setattr(tm, "mma_gemv", lambda *args, **kw: calls.append(args[0].shape[0]) or real(*args, **kw))
    bound = 8 if op == "fp8" else 16
    for m in (bound, bound + 1):
        a = FP8.quantize(torch.randn(m, 384), "group", 128)
        if op == "fp8":
            b = FP8.quantize(torch.randn(32, 384), "block", 128)
            args, fn = (b.data, b.scale), fp8_gemm
        else:
            _, b = _fp4_operands(1, 32, 384)
            args, fn = (b.packed, b.scale), fp4_gemm
        c = fn(a.data.cuda(), a.scale.cuda(), *(t.cuda() for t in args))
        assert rel_err(c, a.dequantize(torch.float64) @ b.dequantize(torch.float64).T) < TOL
    assert calls == [bound]


def test_mma_gemv_fp4_scale_bytes_0_and_255(backend):
    """UE8M0 byte 0 is 2^-127 (not 0: the kernel's max() trick) and byte 255 is NaN: every output
    of a row holding a 255 is NaN, as in the reference; the other rows are unaffected."""
    if not backend.is_triton:
        pytest.skip(NEEDS_TRITON)
    from lowbit.ops.fp4_gemm.reference import fp4_gemm_ref

    a, b = _fp4_operands(3, 40, 256)
    scale = b.scale.clone()
    scale[5, 2] = 0
    scale[7, :] = 0
    scale[11, 6] = 255
    scale[30, 0] = 255
    b = MXFP4(b.packed, scale)
    c = _run(backend, a, b.packed, b.scale, True, (2, 2), nan_ok=True)
    ref = fp4_gemm_ref(a.data, a.scale, b.packed, b.scale)
    nan_rows = torch.zeros(40, dtype=torch.bool)
    nan_rows[[11, 30]] = True
    assert torch.equal(torch.isnan(c.cpu()), nan_rows.expand(3, 40))
    assert torch.equal(torch.isnan(ref), nan_rows.expand(3, 40))
    keep = ~nan_rows
    assert rel_err(c.cpu()[:, keep], a.dequantize(torch.float64) @ b.dequantize(torch.float64)[keep].T) < TOL


@pytest.mark.cuda
@pytest.mark.parametrize("fp4", [False, True])
def test_cuda_mma_gemv_ptxas_o1_and_pdl(fp4):
    """The launch options: a programmatic dependent launch (with the early trigger) gives the same
    bits; the ptxas -O1 build (every load before the first MMA) is right against fp64 and within
    one bf16 ulp of the -O3 build (ptxas may fuse the epilogue's multiply-adds differently); the
    picked config (this weight is a short launch: both) gives the -O1 bits."""
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("ptxas options only apply to a GPU build (sm_90 here)")
    m, n, k = 5, 520, 1536
    a, b, data, scale = _either_operands(fp4, m, n, k)
    args = [t.cuda() for t in (a.data, a.scale, data, scale)]
    picked = pick_config(n, k, m, fp4)
    assert picked.pdl and picked.ptxas == "-O1"
    cfg = MmaGemvConfig(1, 8, picked.decode)
    shipped = mma_gemv(*args, fp4=fp4, config=cfg._replace(pdl=True, ptxas="-O1"))
    plain = mma_gemv(*args, fp4=fp4, config=cfg)
    assert torch.equal(mma_gemv(*args, fp4=fp4, config=cfg._replace(pdl=True)), plain)
    o1 = mma_gemv(*args, fp4=fp4, config=cfg._replace(ptxas="-O1"))
    assert torch.equal(shipped, o1)
    assert rel_err(o1, a.dequantize(torch.float64) @ b.dequantize(torch.float64).T) < TOL
    torch.testing.assert_close(o1.float(), plain.float(), rtol=2**-7, atol=0)


def test_mma_gemv_config_rule():
    """Short launches (weight bytes <= SHORT_LAUNCH_BYTES) get PDL and -O1, long ones neither; the
    FP4 decode is "f16" from two column tiles (M > 8)."""
    from lowbit.ops.fp8_gemm import mma_gemv as tm

    assert tm.weight_bytes(7168, 2048, False) == 7168 * 2048 + 4 * 56 * 16
    assert tm.weight_bytes(7168, 2048, True) == 7168 * 1024 + 7168 * 64
    for n, k, fp4, short in ((2112, 7168, False, True), (4096, 7168, False, True), (7168, 2048, False, True),
                             (24576, 1536, False, False), (7168, 16384, False, False), (7168, 16384, True, False),
                             (24576, 1536, True, True)):
        cfg = pick_config(n, k, 1, fp4)
        assert (cfg.pdl, cfg.ptxas) == ((True, "-O1") if short else (False, None)), (n, k, fp4)
    assert pick_config(7168, 16384, 1).decode == "e4m3" and pick_config(7168, 16384, 9).decode == "f16"
    assert pick_config(7168, 16384, 1)[:2] == (2, 8) and pick_config(7168, 16384, 16)[:2] == (2, 4)
    assert pick_config(7168, 2048, 1, fp4=False)[:2] == (1, 4)
