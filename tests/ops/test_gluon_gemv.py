"""The cp.async-staged FP4 decode GEMV (``fp8_gemm/gluon_gemv.py``): bit-identical to the
register-fed ``mma_gemv`` it restages, and against an fp64 reference of the dequantized operands.
Gluon has no interpreter, so the kernel tests are GPU-tier only; its argument checks run anywhere."""
from __future__ import annotations

import pytest
import torch

from lowbit.formats import MXFP4
from lowbit.ops.fp8_gemm import gluon_gemv as gg
from lowbit.ops.fp8_gemm.triton_mma import mma_gemv
from tests._helpers import rel_err
from tests.ops.test_mma_gemv import TOL, _fp4_operands


def _sm90_or_skip():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("the cp.async GEMV is a Gluon kernel (sm_90 inline PTX); the interpreter cannot run Gluon")
    if gg._GLUON_IMPORT_ERROR is not None:
        pytest.skip(f"triton.experimental.gluon does not import: {gg._GLUON_IMPORT_ERROR}")


def _cuda(a, b):
    return a.data.cuda(), a.scale.cuda(), b.packed.cuda(), b.scale.cuda()


# (m, n, k, (RT, W, STAGES)): one / two column tiles, partial row tiles (n % 16, n % 32), K blocks
# not a multiple of W, fewer iterations than stages, iterations not a multiple of the unroll
CASES = [(1, 64, 256, (1, 1, 2)), (1, 4096, 7168, (1, 8, 3)), (3, 40, 384, (1, 2, 4)), (8, 33, 1280, (2, 4, 3)),
         (9, 72, 512, (2, 4, 2)), (16, 136, 2048, (1, 4, 4)), (16, 2112, 7168, (1, 8, 3)), (5, 24, 1664, (1, 2, 5)),
         (2, 48, 128, (2, 8, 4))]


@pytest.mark.cuda
@pytest.mark.parametrize("m,n,k,cfg", CASES)
@pytest.mark.parametrize("decode", ["e4m3", "f16"])
def test_cuda_gluon_gemv_matches_mma_gemv(m, n, k, cfg, decode):
    """Same bits as the register-fed kernel with the same decode, and fp64-close; output poisoned."""
    _sm90_or_skip()
    a, b = _fp4_operands(m, n, k)
    args = _cuda(a, b)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    c = gg.gluon_gemv(*args, config=cfg, out=out, decode=decode)
    assert c is out and not torch.isnan(c).any()
    ref = mma_gemv(*args, fp4=True, config=(cfg[0], cfg[1]), decode=decode)
    assert torch.equal(c, ref)
    assert rel_err(c.cpu(), a.dequantize(torch.float64) @ b.dequantize(torch.float64).T) < TOL


@pytest.mark.cuda
def test_cuda_gluon_gemv_e8m0_and_nan_scales():
    """UE8M0 activation scales, weight scale byte 0 (2^-127) and 255 (the row's outputs NaN)."""
    _sm90_or_skip()
    a, b = _fp4_operands(12, 40, 512, scale_fmt="ue8m0")
    scale = b.scale.clone()
    scale[5, 2] = 0
    scale[11, 6] = 255
    scale[30, 0] = 255
    b = MXFP4(b.packed, scale)
    x, xs, w, ws = _cuda(a, b)
    xs = xs.to(torch.float8_e8m0fnu)
    c = gg.gluon_gemv(x, xs, w, ws, config=(2, 2, 3))
    torch.testing.assert_close(c, mma_gemv(x, xs, w, ws, fp4=True, config=(2, 2)), rtol=0, atol=0, equal_nan=True)
    nan_rows = torch.zeros(40, dtype=torch.bool)
    nan_rows[[11, 30]] = True
    assert torch.equal(torch.isnan(c.cpu()), nan_rows.expand(12, 40))


@pytest.mark.cuda
def test_cuda_gluon_gemv_graph_replay():
    """Capturable: a CUDA graph replays it on new inputs copied into the captured buffers."""
    _sm90_or_skip()
    a, b = _fp4_operands(4, 256, 1024)
    args = [t.clone() for t in _cuda(a, b)]
    gg.gluon_gemv(*args)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = gg.gluon_gemv(*args)
    a2, b2 = _fp4_operands(4, 256, 1024)
    for dst, src in zip(args, _cuda(a2, b2)):
        dst.copy_(src)
    graph.replay()
    assert torch.equal(out, gg.gluon_gemv(*args))
    assert rel_err(out.cpu(), a2.dequantize(torch.float64) @ b2.dequantize(torch.float64).T) < TOL


def test_gluon_gemv_checks():
    """Bad shapes and configs raise ValueError before any launch (CPU tensors: nothing launches)."""
    if gg._GLUON_IMPORT_ERROR is not None:
        pytest.skip(f"triton.experimental.gluon does not import: {gg._GLUON_IMPORT_ERROR}")
    a, b = _fp4_operands(2, 32, 256)
    args = (a.data, a.scale, b.packed, b.scale)
    with pytest.raises(ValueError, match="1 <= M <= 16"):
        gg.gluon_gemv(torch.zeros(17, 256, dtype=torch.float8_e4m3fn), torch.ones(17, 2), b.packed, b.scale)
    with pytest.raises(ValueError, match=r"b \[N, K/2\]"):
        gg.gluon_gemv(a.data, a.scale, b.packed[:, :64], b.scale)
    with pytest.raises(ValueError, match="STAGES >= 2"):
        gg.gluon_gemv(*args, config=(1, 2, 1))
    with pytest.raises(ValueError, match="W a power of two"):
        gg.gluon_gemv(*args, config=(1, 3, 2))
    with pytest.raises(ValueError, match="decode"):
        gg.gluon_gemv(*args, config=(1, 2, 2), decode="bf16")
    assert not gg.gluon_gemv_ok(a.data, b.packed, b.scale)  # CPU tensors never take it
