"""The int8-wgmma coarse pass of the draft head's fast mode (``lowbit/ops/coarse_head/gluon_wgmma.py``)
and its x preparation (``x_int8.py``).

CPU tiers: the int8 rounding of x and its stage tiling (interpreter kernel vs the torch
definition, bit for bit), the (scale, zero) words, and a torch emulation of the kernel's
arithmetic over exactly those tensors against the dequantized INTx rows -- so the layouts are
checked in CI. GPU tier: the Gluon kernel itself (Gluon does not run under the interpreter;
``scripts/coarse_wgmma_offline.py`` compiles it for sm_90 without a GPU), the dispatch from
``DraftHead``, CUDA-graph replay and ``torch.compile``."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import lowbit
from lowbit.formats import INTx
from lowbit.ops.coarse_head import reference as ref
from lowbit.ops.coarse_head.gluon_wgmma import wgmma_sz
from lowbit.ops.coarse_head.x_int8 import tile_reference, x_int8_reference, x_int8_tiles
from tests._helpers import rel_err


def _x(m, k, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g)
    x[:, 3] *= 40.0  # an outlier channel: the row scale follows it
    return x.to(dtype)


def test_x_int8_reference_rounds_to_the_row_scale():
    x = torch.tensor([[0.0, 1.0, -2.0, 0.5], [0.0, 0.0, 0.0, 0.0], [3.0, -3.0, 1.5, 127.0]])
    q, sx = x_int8_reference(x)
    assert q.dtype == torch.int8 and sx.dtype == torch.float32
    assert q[0].tolist() == [0, 64, -127, 32]  # 63.5 and 31.75: ties to even, then nearest
    assert q[1].tolist() == [0, 0, 0, 0] and sx[1] == 0
    assert q[2].tolist() == [3, -3, 2, 127]  # 1.5 -> 2 (tie to even)
    assert torch.allclose(sx, x.abs().amax(1) / 127)
    # |x - q sx| <= sx / 2 everywhere
    assert ((x - q.float() * sx[:, None]).abs() <= sx[:, None] / 2 + 1e-6).all()


def test_x_int8_reference_is_the_ieee_fp32_definition():
    """q = rint(x * fl(127 / amax)) with a true fp32 division (numpy's), not torch's
    ``127.0 / t`` (a reciprocal times 127, an ulp off on a quarter of the rows): the GPU kernel
    divides exactly, and one ulp moves ties of x * inv to the other integer."""
    x = _x(4096, 256, seed=5, dtype=torch.bfloat16).float()  # bf16 values: ties of x * inv are common
    q, sx = x_int8_reference(x)
    xn = x.numpy()
    amax = np.abs(xn).max(axis=1)
    inv = np.float32(127.0) / amax
    want = np.clip(np.rint(xn * inv[:, None]), -127, 127).astype(np.int8)
    assert np.array_equal(q.numpy(), want)
    assert np.array_equal(sx.numpy(), amax / np.float32(127.0))


@pytest.mark.parametrize("bits,k,m,dtype", [(2, 640, 3, torch.float32), (4, 576, 9, torch.bfloat16),
                                            (2, 208, 8, torch.float16), (4, 1024, 1, torch.float32)])
def test_x_int8_tiles_match_the_definition(backend, bits, k, m, dtype):
    """The kernel's codes, 64-sums and scales equal the torch definition bit for bit (interpreter
    and GPU); rows past M and K positions past K are zero."""
    if not backend.is_triton:
        pytest.skip("a Triton kernel: the interpret / cuda tiers run it (the reference tier has nothing to compare)")
    p = 8 // bits
    ell = INTx.quantize(torch.zeros(1, k), bits=bits, group_size=64).packed.shape[1]
    nb = max(8, 1 << (m - 1).bit_length())
    x = _x(m, k, dtype=dtype).to(backend.device)
    with backend.active():
        xq, xs, sx = x_int8_tiles(x, ell, p, nb)
    q, s = x_int8_reference(x.cpu())
    tq, ts = tile_reference(q, ell, p, nb)
    assert torch.equal(xq.cpu(), tq)
    ns = ell // 64
    rows = torch.tensor([si * 4 + j for si in range(ns) for j in range(p)])
    assert torch.equal(xs.cpu()[rows], ts[rows])
    assert torch.equal(sx.cpu()[:m], s) and (sx.cpu()[m:] == 0).all()


def test_x_int8_tiles_validates():
    with pytest.raises(ValueError, match="M <= 8"):
        x_int8_tiles(torch.zeros(9, 64), 64, 1, 8)


@pytest.mark.parametrize("bits,group", [(2, 64), (4, 64), (2, 128), (4, 256)])
def test_wgmma_words(bits, group):
    w = torch.randn(5, 1024)
    f = INTx.quantize(w, bits=bits, group_size=group)
    ell = f.packed.shape[1]
    words = wgmma_sz(f.scale, f.zero, bits, group, ell).view(5, ell // 64, 4)
    for s in range(ell // 64):
        for j in range(4):
            if j >= 8 // bits:
                assert (words[:, s, j] == 0).all()
                continue
            g = (j * ell + 64 * s) // group
            assert torch.equal(words[:, s, j] & 0xFFFF, f.scale[:, g].view(torch.int16).to(torch.int32) & 0xFFFF)
            assert torch.equal(words[:, s, j] >> 16, f.zero[:, g].to(torch.int32))


def _emulate(f: INTx, x: torch.Tensor) -> torch.Tensor:
    """fp64 logits [M, N] computed the kernel's way from the kernel's own inputs: per (stage,
    plane), the integer dot of the plane's codes with the x tile minus zero x 64-sum, times the
    word's scale; times sx at the end."""
    bits, p = f.bits, 8 // f.bits
    ell = f.packed.shape[1]
    ns, m = ell // 64, x.shape[0]
    nb = max(8, 1 << (m - 1).bit_length())
    q, sx = x_int8_reference(x)
    tiles, xsum = tile_reference(q, ell, p, nb)
    tiles = tiles.view(ns, p, 2, nb, 32).long()
    xsum = xsum.view(ns, 4, nb).long()
    words = wgmma_sz(f.scale, f.zero, bits, f.group_size, ell).view(-1, ns, 4)
    codes = f.packed.long()
    acc = torch.zeros(f.packed.shape[0], nb, dtype=torch.float64)
    for s in range(ns):
        byte = codes[:, 64 * s: 64 * s + 64]  # [N, 64]
        for j in range(p):
            plane = (byte >> (bits * j)) & ((1 << bits) - 1)
            xt = torch.cat([tiles[s, j, 0], tiles[s, j, 1]], dim=1)  # [NB, 64]
            d = plane @ xt.T - (words[:, s, j] >> 16)[:, None].long() * xsum[s, j][None, :]
            sc = (words[:, s, j] & 0xFFFF).to(torch.int16).view(torch.float16).double()
            acc += d.double() * sc[:, None]
    return (acc * torch.cat([sx, torch.zeros(nb - m)]).double()[None, :]).T[:m]


@pytest.mark.parametrize("bits,group,k,m", [(2, 64, 640, 5), (4, 128, 1008, 17), (2, 128, 576, 1)])
def test_emulated_kernel_arithmetic_matches_the_dequantized_rows(bits, group, k, m):
    """The stage layout, words and x sums carry exactly the dot of the dequantized INTx rows with
    the int8-rounded x (so the kernel only has to follow them)."""
    w = torch.randn(37, k) * 0.05
    f = INTx.quantize(w, bits=bits, group_size=group)
    x = _x(m, k, seed=1)
    q, sx = x_int8_reference(x)
    want = (q.double() * sx.double()[:, None]) @ f.dequantize(torch.float64).T
    assert rel_err(_emulate(f, x), want) < 1e-12


# ---- GPU tier: the Gluon kernel -------------------------------------------------------------------

def _kernel_or_skip():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the int8-wgmma coarse pass is sm_90 only (Gluon, wgmma, TMA); the interpreter cannot run Gluon")
    from lowbit.ops.coarse_head import gluon_wgmma as g

    if g._GLUON_IMPORT_ERROR is not None:
        pytest.skip(f"triton.experimental.gluon is not available: {g._GLUON_IMPORT_ERROR}")
    return g


# (bits, group, n, k, m, block, kcand): N not a multiple of the block, K padded inside a plane,
# every NB band (8, 16, 32, 64) and the odd M inside them, 64- and 128-token blocks, more stages
# than the ring and fewer
CASES = [(2, 64, 1000, 640, 1, 128, 8), (4, 64, 777, 576, 3, 128, 4), (2, 128, 4100, 2048, 9, 128, 8),
         (4, 128, 1536, 1024, 16, 64, 2), (2, 64, 640, 5120, 17, 128, 8), (4, 64, 2000, 768, 33, 128, 8),
         (2, 64, 3000, 1280, 64, 128, 16), (4, 256, 300, 4096, 64, 64, 1), (2, 64, 64, 64, 2, 64, 64)]


@pytest.mark.cuda
@pytest.mark.parametrize("bits,group,n,k,m,block,kcand", CASES)
def test_cuda_coarse_wgmma_vs_reference(poison_empty, bits, group, n, k, m, block, kcand):
    """Logits against fp64 (dequantized INTx rows x int8-rounded x), candidates against the
    per-block top-kcand of the kernel's own logits (ties to the lower index); every output written."""
    g = _kernel_or_skip()
    w = torch.randn(n, k) * 0.05
    w[: n // 3, : k // 5] *= 8.0  # groups of very different scales
    f = INTx.quantize(w, bits=bits, group_size=group)
    x = _x(m, k, seed=2, dtype=torch.bfloat16)
    words = wgmma_sz(f.scale, f.zero, bits, group, f.packed.shape[1])
    out = g.coarse_wgmma(x.cuda(), f.packed.cuda(), words.cuda(), n=n, bits=bits, block=block, kcand=kcand,
                         write_logits=True)
    ck, _, ci, _, _, lg = (t.cpu() for t in out)
    q, sx = x_int8_reference(x)
    want = (q.double() * sx.double()[:, None]) @ f.dequantize(torch.float64).T
    assert not torch.isnan(lg).any()
    assert rel_err(lg, want) < 1e-6
    cands = ref.block_candidates_reference(lg, None, block=block, kcand=kcand, write_logits=False)
    assert torch.equal(ck, cands.cand_key) and torch.equal(ci, cands.cand_idx)


@pytest.mark.cuda
def test_cuda_coarse_wgmma_fresh_inputs_and_zero_rows():
    """Back-to-back calls with new x (nothing cached from the last one); an all-zero row of x gives
    zero logits and candidates ordered by token index."""
    g = _kernel_or_skip()
    n, k = 515, 1024
    f = INTx.quantize(torch.randn(n, k) * 0.05, bits=2, group_size=64)
    words = wgmma_sz(f.scale, f.zero, 2, 64, f.packed.shape[1]).cuda()
    packed = f.packed.cuda()
    for seed in range(3):
        x = _x(6, k, seed=seed)
        x[4] = 0
        lg = g.coarse_wgmma(x.cuda(), packed, words, n=n, bits=2, block=128, kcand=4, write_logits=True)[5].cpu()
        q, sx = x_int8_reference(x)
        assert rel_err(lg, (q.double() * sx.double()[:, None]) @ f.dequantize(torch.float64).T) < 1e-6
        assert (lg[4] == 0).all()


@pytest.mark.cuda
@pytest.mark.parametrize("bits", [2, 4])
def test_cuda_draft_head_dispatches_and_stays_exact(bits, monkeypatch):
    """A fast DraftHead on the int8-wgmma pass: every row with a clear winner gets it, with exact
    values; the top-k values are the exact logits of the returned tokens; graph replay and
    torch.compile give the same answers."""
    _kernel_or_skip()
    from lowbit.ops import coarse_head as ch

    monkeypatch.setitem(ch.WGMMA_M_RANGE, bits, (1, 64))
    from lowbit.ops.coarse_head import gluon_wgmma

    calls = []
    real_fn = gluon_wgmma.coarse_wgmma

    def spy(*a, **kw):
        calls.append(a[0].shape[0])
        return real_fn(*a, **kw)

    monkeypatch.setattr(gluon_wgmma, "coarse_wgmma", spy)
    n, k, m = 5000, 1024, 40
    w = (torch.randn(n, k) * 0.02).to(torch.bfloat16).cuda()
    winners = torch.randint(0, n, (m,))
    x = torch.randn(m, k).to(torch.bfloat16).cuda()
    x = x + 4.0 * w[winners].float().sign().to(torch.bfloat16)  # aligned with its winner's row
    head = lowbit.DraftHead(w, bits=bits, mode="fast")
    ids = head.argmax(x)
    assert calls and calls[-1] == m
    exact = x.float() @ w.float().T
    assert torch.equal(ids.cpu(), exact.argmax(-1).cpu())
    vals, idx = head.topk(x, 4)
    assert torch.allclose(vals, exact.gather(1, idx), rtol=1e-5, atol=1e-4)
    assert (vals[:, :-1] >= vals[:, 1:]).all()

    static = x.clone()
    head.argmax(static)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = head.argmax(static)
    x2 = torch.randn(m, k, device="cuda").to(torch.bfloat16) + 4.0 * w[winners.flip(0)].float().sign().to(torch.bfloat16)
    static.copy_(x2)
    graph.replay()
    assert torch.equal(out.cpu(), (x2.float() @ w.float().T).argmax(-1).cpu())

    compiled = torch.compile(head.argmax, fullgraph=True)
    assert torch.equal(compiled(x).cpu(), ids.cpu())
