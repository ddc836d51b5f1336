"""The int8-wgmma coarse pass of the draft head's fast mode (``lowbit/ops/coarse_head/wgmma_int8.py``)
and its x preparation (``x_int8.py``).

CPU tiers: the int8 rounding of x and its stage tiling (interpreter kernel vs the torch
definition, bit for bit), the (scale, zero) words, and a torch emulation of the kernel's
arithmetic over exactly those tensors against the dequantized INTx rows -- so the layouts are
checked in CI. The whole-row variant: its byte-permute decode (a bit-level mirror of the PTX on
random words, and the kernel's sums emulated over the permuted x tiles), its words and row units,
and its reference against rows with the rounded scales. The launch configuration and the launches
the launcher makes (recorded on CPU stand-ins). GPU tier: the Gluon kernels themselves (Gluon does
not run under the interpreter), the dispatch from ``DraftHead``, CUDA-graph replay and
``torch.compile``."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import lowbit
from lowbit.formats import INTx
from lowbit.ops.coarse_head import reference as ref
from lowbit.ops.coarse_head import x_int8
from lowbit.ops.coarse_head.wgmma_pack import (table_coefficients, table_reference, wgmma_sz, wgmma_sz_bytes,
                                               wgmma_sz_views, wgmma_table)
from lowbit.ops.coarse_head.x_int8 import prmt_k_order, prmt_source, tile_reference, x_int8_reference, x_int8_tiles
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


@pytest.mark.parametrize("bits,k,m,dtype,perm,pairs", [
    (2, 640, 3, torch.float32, False, 16), (4, 576, 9, torch.bfloat16, False, 16),
    (2, 208, 8, torch.float16, False, 16), (4, 1024, 1, torch.float32, False, 16),
    (2, 640, 3, torch.bfloat16, True, 16), (2, 208, 5, torch.float32, True, 16),
    (2, 1008, 9, torch.float32, True, 2), (4, 576, 2, torch.float16, False, 4),
    (2, 640, 1, torch.bfloat16, False, 4), (2, 5120, 2, torch.bfloat16, True, 2)])
def test_x_int8_tiles_match_the_definition(backend, monkeypatch, bits, k, m, dtype, perm, pairs):
    """The kernel's codes, 64-sums and scales equal the torch definition bit for bit (interpreter
    and GPU), in plane order and in the byte-permute order, with one or several programs a row
    (``pairs``: the (stage, plane) pairs a program step takes; at K = 5120 and 2 a step, five
    steps a program); rows past M and K positions past K are zero."""
    if not backend.is_triton:
        pytest.skip("a Triton kernel: the interpret / cuda tiers run it (the reference tier has nothing to compare)")
    monkeypatch.setattr(x_int8, "X_TILE_PAIRS", pairs)
    p = 8 // bits
    ell = INTx.quantize(torch.zeros(1, k), bits=bits, group_size=64).packed.shape[1]
    nb = max(8, 1 << (m - 1).bit_length())
    x = _x(m, k, dtype=dtype).to(backend.device)
    with backend.active():
        xq, xs, sx = x_int8_tiles(x, ell, p, nb, perm=perm)
    q, s = x_int8_reference(x.cpu())
    tq, ts = tile_reference(q, ell, p, nb, perm=perm)
    assert torch.equal(xq.cpu(), tq)
    ns = ell // 64
    rows = torch.tensor([si * 4 + j for si in range(ns) for j in range(p)])
    assert torch.equal(xs.cpu()[rows], ts[rows])
    assert torch.equal(sx.cpu()[:m], s) and (sx.cpu()[m:] == 0).all()


@pytest.mark.parametrize("planes,perm", [(4, True), (4, False), (2, False)])
def test_tile_reference_is_the_definition(planes, perm):
    """xq_tiles[(s 2 + c) NB + m, 32 j + b] = xq[m, j L + 64 s + 32 c + b] and xsum[s 4 + j, m] its
    64-sum (the module docstring's definition; with ``perm`` the K positions of
    ``prmt_k_order``), element by element; zeros past M and K."""
    g = torch.Generator().manual_seed(5)
    ell, nb, m = 192, 8, 3
    q = torch.randint(-127, 128, (m, planes * ell - 7), generator=g).to(torch.int8)
    t, xs = tile_reference(q, ell, planes, nb, perm=perm)
    assert t.shape == (ell // 64 * 2 * nb, 32 * planes) and xs.shape == (ell // 64 * 4, nb)
    full = torch.zeros(nb, planes * ell, dtype=torch.int64)
    full[:m, : q.shape[1]] = q.long()
    order = prmt_k_order(ell) if perm else torch.arange(planes * ell)
    for s_ in range(ell // 64):
        for j in range(planes):
            pos = order[j * ell + 64 * s_ + torch.arange(64)]
            for mm in (0, 2, 5):
                for c in range(2):
                    got = t[(s_ * 2 + c) * nb + mm, 32 * j:32 * j + 32].long()
                    assert torch.equal(got, full[mm, pos[32 * c:32 * c + 32]])
                assert xs[s_ * 4 + j, mm] == full[mm, pos].sum()


def test_x_int8_tiles_validates():
    with pytest.raises(ValueError, match="M <= 8"):
        x_int8_tiles(torch.zeros(9, 64), 64, 1, 8)
    with pytest.raises(ValueError, match="4 planes"):
        x_int8_tiles(torch.zeros(2, 128), 64, 2, 8, perm=True)
    with pytest.raises(ValueError, match="4 planes"):
        tile_reference(torch.zeros(2, 128, dtype=torch.int8), 64, 2, 8, perm=True)


def test_prmt_k_order_permutes_each_stage():
    """The byte-permute order: a permutation of each stage's 256 K positions; register 0 starts with
    byte 0's codes of planes 0 and 2, then byte 1's (the selector nibbles' order)."""
    ell = 192
    order = prmt_k_order(ell)
    assert torch.equal(order.sort().values, torch.arange(4 * ell))
    stage = lambda kk: (kk % ell) // 64  # noqa: E731 - K index -> its stage
    dest = torch.arange(4 * ell)
    assert torch.equal(stage(order), stage(dest))
    assert [prmt_source(b, 0) for b in range(4)] == [(0, 0), (2, 0), (0, 1), (2, 1)]
    assert [prmt_source(b, 3) for b in (32, 33, 34, 35, 52)] == [(1, 34), (3, 34), (1, 35), (3, 35), (1, 54)]


@pytest.mark.parametrize("bits,group", [(2, 64), (4, 64), (2, 128), (4, 256)])
def test_wgmma_words(bits, group):
    w = torch.randn(5, 1024)
    f = INTx.quantize(w, bits=bits, group_size=group)
    ell = f.packed.shape[1]
    p = 8 // bits
    ns = ell // 64
    words = wgmma_sz(f.scale, f.zero, bits, group, ell)
    assert words.shape == ((2 * p + 1) * ns * 16,) and words.dtype == torch.uint8  # N = 5 padded to 16 rows
    scales, zeros = wgmma_sz_views(words, bits, ell)
    assert scales.shape == (p * ns, 16) and scales.dtype == torch.float16
    assert zeros.shape == (ns, 16) and zeros.dtype == torch.uint8
    assert scales.data_ptr() == words.data_ptr() and zeros.data_ptr() == words.data_ptr() + 2 * p * ns * 16
    assert (scales[:, 5:] == 0).all() and (zeros[:, 5:] == 0).all()
    scales = scales.view(ns, p, 16)
    for s in range(ns):
        for j in range(p):
            g = (j * ell + 64 * s) // group
            assert torch.equal(scales[s, j, :5].view(torch.int16), f.scale[:, g].view(torch.int16))
            zj = (zeros[s, :5].to(torch.int32) >> (bits * j)) & ((1 << bits) - 1)
            assert torch.equal(zj, f.zero[:, g].to(torch.int32))


def _emulate(f: INTx, x: torch.Tensor) -> torch.Tensor:
    """fp64 logits [M, N] computed the per-group kernel's way from its own inputs: per (stage,
    plane), the integer dot of the plane's codes with the x tile minus zero x 64-sum, times the
    word's scale; times sx at the end."""
    bits, p = f.bits, 8 // f.bits
    ell = f.packed.shape[1]
    ns, m = ell // 64, x.shape[0]
    nb = max(8, 1 << (m - 1).bit_length())
    q, sx = x_int8_reference(x)
    tiles, xsum = tile_reference(q, ell, p, nb)
    tiles = tiles.view(ns, 2, nb, p, 32).long()  # [stage, half, row of x, plane, byte]
    xsum = xsum.view(ns, 4, nb).long()
    n = f.packed.shape[0]
    scales, zeros = wgmma_sz_views(wgmma_sz(f.scale, f.zero, bits, f.group_size, ell), bits, ell)
    scales = scales.view(ns, p, -1)[:, :, :n].double()
    zeros = zeros[:, :n].long()
    codes = f.packed.long()
    acc = torch.zeros(f.packed.shape[0], nb, dtype=torch.float64)
    for s in range(ns):
        byte = codes[:, 64 * s: 64 * s + 64]  # [N, 64]
        for j in range(p):
            plane = (byte >> (bits * j)) & ((1 << bits) - 1)
            xt = torch.cat([tiles[s, 0, :, j], tiles[s, 1, :, j]], dim=1)  # [NB, 64]
            z = (zeros[s] >> (bits * j)) & ((1 << bits) - 1)
            d = plane @ xt.T - z[:, None] * xsum[s, j][None, :]
            acc += d.double() * scales[s, j][:, None]
    return (acc * torch.cat([sx, torch.zeros(nb - m)]).double()[None, :]).T[:m]


@pytest.mark.parametrize("bits,group,k,m", [(4, 128, 1008, 17), (4, 64, 1024, 9), (4, 256, 576, 1)])
def test_emulated_kernel_arithmetic_matches_the_dequantized_rows(bits, group, k, m):
    """The per-group pass's stage layout, words and x sums carry exactly the dot of the dequantized
    INTx rows with the int8-rounded x (so the kernel only has to follow them)."""
    w = torch.randn(37, k) * 0.05
    w[0] = torch.linspace(-1, 1, k)  # every code of a row
    f = INTx.quantize(w, bits=bits, group_size=group)
    x = _x(m, k, seed=1)
    x[0] = x[0].abs() * 100  # sums of x at the int8 extreme
    q, sx = x_int8_reference(x)
    want = (q.double() * sx.double()[:, None]) @ f.dequantize(torch.float64).T
    assert rel_err(_emulate(f, x), want) < 1e-12


def _prmt(a: np.ndarray, b: np.ndarray, sel: np.ndarray) -> np.ndarray:
    """PTX ``prmt.b32`` (default mode): byte i of the result is byte ``sel`` nibble i (bits 0..2) of
    {b, a}, or that byte's sign replicated where the nibble's bit 3 is set."""
    src = (a.astype(np.uint64) | (b.astype(np.uint64) << 32))
    out = np.zeros(np.broadcast(a, b, sel).shape, dtype=np.uint64)
    for i in range(4):
        nib = (sel >> (4 * i)) & 0xF
        byte = (src >> (8 * (nib & 7)).astype(np.uint64)) & 0xFF
        byte = np.where(nib & 8, np.where(byte & 0x80, 0xFF, 0), byte)
        out |= byte.astype(np.uint64) << np.uint64(8 * i)
    return out.astype(np.uint32)


def _prmt_decode(word, t0, t2, t1, t3):
    """The byte-permute decode line by line as its PTX (``wgmma_int8._PRMT_ASM``): 4 uint32 registers."""
    s = (word & 0x33333333) | 0x40404040
    r0, r1 = _prmt(t0, t2, s), _prmt(t0, t2, s >> 16)
    s = ((word >> 2) & 0x33333333) | 0x40404040
    return r0, r1, _prmt(t1, t3, s), _prmt(t1, t3, s >> 16)


def test_prmt_decode_gives_each_code_its_table_byte():
    """Random words and tables: every output byte is the table byte of the code that
    ``x_int8.prmt_source`` says it holds (register v, K slot e of the word)."""
    rng = np.random.default_rng(7)
    word = rng.integers(0, 2**32, 4096, dtype=np.uint64).astype(np.uint32)
    t = rng.integers(0, 2**32, (4, 4096), dtype=np.uint64).astype(np.uint32)
    regs = _prmt_decode(word, t[0], t[2], t[1], t[3])
    for v in range(4):
        for e in range(4):
            j, byte = prmt_source(e, v)
            code = (word >> (8 * byte + 2 * j)) & 3
            want = (t[j] >> (8 * code)) & 0xFF
            assert np.array_equal((regs[v] >> (8 * e)) & 0xFF, want), (v, e)


def _tables_mirror(word: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``wgmma_int8._TABLE_ASM`` op by op on uint32 words of two group codes: byte 0 (resp. 2)
    zero-extended times 0x03020100 plus byte 1 (resp. 3) repeated, xor 0x80808080."""
    w = word.astype(np.uint64)
    out = []
    for lo in (0, 16):
        a = (w >> lo) & 0xFF
        b = ((w >> (lo + 8)) & 0xFF) * 0x01010101
        out.append((((a * 0x03020100 + b) & 0xFFFFFFFF) ^ 0x80808080).astype(np.uint32))
    return out[0], out[1]


def _emulate_prmt_kernel(packed: torch.Tensor, words: torch.Tensor, tiles: torch.Tensor, nb: int) -> torch.Tensor:
    """int64 [N, NB]: the whole-row kernel with the byte-permute decode, from its own operands --
    per stage the rows' byte tables built from their group codes, per half the 8 packed words of a
    row decoded (the PTX mirrors) into the A registers of K slots 4 w + e, dotted with the permuted
    x tile of (stage, register, half)."""
    n, ell = packed.shape
    ns = ell // 64
    pw = packed.numpy().view(np.uint32).reshape(n, ns, 2, 8)  # [N, NS, half, word]
    cw = words.numpy().view(np.uint32).reshape(ns, 2, -1)[:, :, :n].transpose(2, 0, 1)  # [N, NS, 2]
    t0, t1 = (t[:, :, None, None] for t in _tables_mirror(cw[..., 0]))
    t2, t3 = (t[:, :, None, None] for t in _tables_mirror(cw[..., 1]))
    regs = _prmt_decode(pw, t0, t2, t1, t3)  # 4 x [N, NS, 2, 8]
    a = np.stack([r.view(np.int8).reshape(n, ns, 2, 32) for r in regs], axis=2)  # [N, NS, v, half, slot]
    xt = tiles.view(ns, 2, nb, 4, 32).permute(0, 3, 1, 2, 4).numpy()  # [NS, v, half, NB, slot]
    return torch.from_numpy(np.einsum("nsvhk,svhmk->nm", a.astype(np.int64), xt.astype(np.int64)))


@pytest.mark.parametrize("group,k,m", [(64, 640, 5), (128, 1024, 9), (64, 208, 1)])
def test_emulated_prmt_kernel_is_the_table_reference(group, k, m):
    """The byte-permute decode over the permuted x tiles sums exactly what the whole-row reference
    sums in plain K order."""
    g = torch.Generator().manual_seed(11)
    w = torch.randn(29, k, generator=g) * 0.05
    w[:9, : k // 3] *= 8.0
    f = INTx.quantize(w, bits=2, group_size=group)
    ell = f.packed.shape[1]
    words, r = wgmma_table(f.scale, f.zero, 2, group, ell)
    x = _x(m, k, seed=12)
    q, sx = x_int8_reference(x)
    nb = max(8, 1 << (m - 1).bit_length())
    tiles, _ = tile_reference(q, ell, 4, nb, perm=True)
    dot = _emulate_prmt_kernel(f.packed, words, tiles, nb)[:, :m].T
    got = (dot.double() * sx.double()[:, None] * r.double()[None, :]).float()
    assert torch.equal(got, table_reference(f.packed, words, r, q, sx, 2))


@pytest.mark.parametrize("group", [64, 128, 256])
def test_wgmma_table_words(group):
    g = torch.Generator().manual_seed(3)
    w = torch.randn(6, 1024, generator=g) * torch.logspace(-2, 0, 1024 // 64).repeat_interleave(64)
    w[2] = 0.0  # an all-zero row
    f = INTx.quantize(w, bits=2, group_size=group)
    ell = f.packed.shape[1]
    words, r = wgmma_table(f.scale, f.zero, 2, group, ell)
    a, r2 = table_coefficients(f.scale, f.zero, 2)
    assert torch.equal(r, r2) and r.dtype == torch.float32 and (r > 0).all()
    z = f.zero.to(torch.int32)
    assert ((a * torch.maximum(z, 3 - z)) <= 127).all() and (a >= 0).all()
    ns = ell // 64
    assert words.shape == (2 * ns, 8) and words.dtype == torch.int32 and (words[:, 6:] == 0).all()
    words = words.view(ns, 2, 8)[:, :, :6].numpy()
    for s in range(ns):
        for j in range(4):  # plane j's group code: the 16-bit half j % 2 of word (s, j // 2)
            gi = (j * ell + 64 * s) // group
            code = (words[s, j // 2].view(np.uint32) >> (16 * (j % 2))) & 0xFFFF
            assert np.array_equal(code, (a[:, gi] | ((128 - a[:, gi] * z[:, gi]) << 8)).numpy())
            table = _tables_mirror(words[s, j // 2].view(np.uint32))[j % 2]
            for c in range(4):  # byte c of the built table: the int8 weight A (c - z) of the group
                byte = ((table >> (8 * c)) & 0xFF).astype(np.uint8).view(np.int8).astype(np.int32)
                assert np.array_equal(byte, (a[:, gi] * (c - z[:, gi])).numpy())
    # each row's largest group keeps its scale to within half a unit of A (A >= 42 there)
    top = (f.scale.float() * torch.maximum(z, 3 - z)).argmax(dim=1)
    s_top = f.scale.float().gather(1, top[:, None]).squeeze(1)
    a_top = a.gather(1, top[:, None]).squeeze(1).float()
    ok = torch.arange(6) != 2
    assert ((a_top * r - s_top).abs() <= 0.5 * r * (1 + 1e-5))[ok].all()
    with pytest.raises(ValueError, match="bits"):
        wgmma_table(f.scale, f.zero, 4, group, ell)


@pytest.mark.parametrize("k,m", [(640, 5), (1008, 17), (576, 1)])
def test_table_reference_is_the_rounded_scales(k, m):
    """The whole-row reference (decoded from the words) is exactly the INT2 rows with each group
    scale replaced by ``A r``, times the int8-rounded x; and close to the exact scales."""
    g = torch.Generator().manual_seed(4)
    w = torch.randn(41, k, generator=g) * 0.05
    w[:13, : k // 5] *= 8.0
    f = INTx.quantize(w, bits=2, group_size=64)
    words, r = wgmma_table(f.scale, f.zero, 2, 64, f.packed.shape[1])
    a, _ = table_coefficients(f.scale, f.zero, 2)
    x = _x(m, k, seed=5)
    q, sx = x_int8_reference(x)
    got = table_reference(f.packed, words, r, q, sx, 2)
    codes = f.codes().double()
    rows = ((codes.view(41, -1, 64) - f.zero.double()[..., None]) * (a.double() * r.double()[:, None])[..., None])
    want = (q.double() * sx.double()[:, None]) @ rows.view(41, -1)[:, :k].T
    assert rel_err(got, want) < 1e-6
    exact = (q.double() * sx.double()[:, None]) @ f.dequantize(torch.float64).T
    assert rel_err(got, exact) < 0.05


def _gluon_or_skip():
    """The kernel module where Gluon imports (its launcher validates on any device), else a skip."""
    from lowbit.ops.coarse_head import wgmma_int8 as g

    if g.GLUON_ERROR is not None:
        pytest.skip(f"triton.experimental.gluon is not available: {g.GLUON_ERROR}")
    return g


def test_coarse_wgmma_table_validates():
    """The whole-row variant refuses INT4, INT2 runs only as it, and row units of the wrong shape /
    dtype are refused (before any launch)."""
    g = _gluon_or_skip()
    f4 = INTx.quantize(torch.randn(10, 256), bits=4, group_size=64)
    words = wgmma_sz(f4.scale, f4.zero, 4, 64, f4.packed.shape[1])
    with pytest.raises(ValueError, match="whole-row"):
        g.coarse_wgmma(torch.randn(2, 256), f4.packed, words, n=10, bits=4, block=128, kcand=1, write_logits=False,
                       table_r=torch.ones(10))
    f2 = INTx.quantize(torch.randn(10, 256), bits=2, group_size=64)
    with pytest.raises(ValueError, match="whole-row"):  # INT2 runs only as the whole-row variant
        g.coarse_wgmma(torch.randn(2, 256), f2.packed, wgmma_sz(f2.scale, f2.zero, 2, 64, f2.packed.shape[1]), n=10,
                       bits=2, block=128, kcand=1, write_logits=False)
    words, r = wgmma_table(f2.scale, f2.zero, 2, 64, f2.packed.shape[1])
    for bad in (r[:9], r.double()):
        with pytest.raises(ValueError, match="row units"):
            g.coarse_wgmma(torch.randn(2, 256), f2.packed, words, n=10, bits=2, block=128, kcand=1,
                           write_logits=False, table_r=bad)
    for bad in (words[:, :8].contiguous(), words.view(-1, 4, 3)[:, :, 0].contiguous(), words.view(torch.float32)):
        with pytest.raises(ValueError, match="wgmma_table's int32 words"):
            g.coarse_wgmma(torch.randn(2, 256), f2.packed, bad, n=10, bits=2, block=128, kcand=1,
                           write_logits=False, table_r=r)


# ---- GPU tier: the Gluon kernel -------------------------------------------------------------------

def _kernel_or_skip():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the int8-wgmma coarse pass is sm_90 only (Gluon, wgmma, TMA); the interpreter cannot run Gluon")
    return _gluon_or_skip()


def _operands(bits, group, n, k, table, seed=0):
    """(INTx copy, words, row units or None) of a random [n, k] head; groups of very different scales."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=g) * 0.05
    w[: n // 3, : k // 5] *= 8.0
    f = INTx.quantize(w, bits=bits, group_size=group)
    if table:
        words, r = wgmma_table(f.scale, f.zero, bits, group, f.packed.shape[1])
        return f, words, r
    return f, wgmma_sz(f.scale, f.zero, bits, group, f.packed.shape[1]), None


def _config(g, bits, n, k, m, block, group=64):
    ell = INTx.quantize(torch.zeros(1, k), bits=bits, group_size=group).packed.shape[1]
    return g.launch_config(bits, m, n, ell, block)


# (bits, group, n, k, m, block, kcand): N not a multiple of the block, K padded inside a plane,
# every NB band (8, 16, 32, 64) and the odd M inside them, 64- and 128-token blocks, more stages
# than the ring and fewer; NB = 64 on the single-partition kernel (< SPAN_MIN_STAGES stages) and
# spanning two blocks (odd block counts: the last program's second block past N)
CASES = [(2, 64, 1000, 640, 1, 128, 8), (4, 64, 777, 576, 3, 128, 4), (2, 128, 4100, 2048, 9, 128, 8),
         (4, 128, 1536, 1024, 16, 64, 2), (2, 64, 640, 5120, 17, 128, 8), (4, 64, 2000, 768, 33, 128, 8),
         (2, 64, 3000, 1280, 64, 128, 16), (4, 256, 300, 4096, 64, 64, 1), (2, 64, 64, 64, 2, 64, 64),
         (2, 64, 2900, 2048, 40, 128, 8), (4, 64, 1600, 1024, 57, 128, 16), (2, 128, 999, 2048, 64, 64, 4)]
SPAN_CASES = [c for c in CASES if c[4] > 32 and c[3] // (8 // c[0]) >= 8 * 64]


@pytest.mark.cuda
@pytest.mark.parametrize("bits,group,n,k,m,block,kcand", [c for c in CASES if c[0] == 4])
def test_cuda_coarse_wgmma_vs_reference(poison_empty, bits, group, n, k, m, block, kcand):
    """Per group (INT4): logits against fp64 (dequantized INTx rows x int8-rounded x), candidates against
    the per-block top-kcand of the kernel's own logits (ties to the lower index); every output
    written. The cases take both kernels and, per NB, the planes pipelined (``WS_PIPE_GROUP``) or
    not and each int32 -> fp32 conversion (``WS_MAGIC_GROUP_NB``)."""
    g = _kernel_or_skip()
    f, words, _ = _operands(bits, group, n, k, False)
    x = _x(m, k, seed=2, dtype=torch.bfloat16)
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
@pytest.mark.parametrize("bits,group,n,k,m,block,kcand", [c for c in CASES if c[0] == 2])
def test_cuda_coarse_wgmma_table_vs_reference(poison_empty, bits, group, n, k, m, block, kcand):
    """The whole-row variant: logits against its reference from the same words (exact int64
    sums), candidates against the per-block top-kcand of its own logits; every output written."""
    g = _kernel_or_skip()
    f, words, r = _operands(bits, group, n, k, True)
    x = _x(m, k, seed=2, dtype=torch.bfloat16)
    out = g.coarse_wgmma(x.cuda(), f.packed.cuda(), words.cuda(), n=n, bits=bits, block=block, kcand=kcand,
                         write_logits=True, table_r=r.cuda())
    ck, _, ci, _, _, lg = (t.cpu() for t in out)
    q, sx = x_int8_reference(x)
    assert not torch.isnan(lg).any()
    assert rel_err(lg, table_reference(f.packed, words, r, q, sx, bits)) < 1e-6
    cands = ref.block_candidates_reference(lg, None, block=block, kcand=kcand, write_logits=False)
    assert torch.equal(ck, cands.cand_key) and torch.equal(ci, cands.cand_idx)


@pytest.mark.cuda
@pytest.mark.parametrize("bits,group,n,k,m,block,kcand", SPAN_CASES)
def test_cuda_coarse_wgmma_span_two_blocks(poison_empty, bits, group, n, k, m, block, kcand):
    """Programs spanning two candidate blocks (NB = 64 on heads of ``SPAN_MIN_STAGES`` stages: 2
    ``block`` rows a program, the x tiles shared by both): the same logits as the reference and
    the same per-block candidates as a program a block -- including an odd block count (the last
    program's second block past N, its candidates not written) -- per group (INT4) and whole-row
    (INT2)."""
    g = _kernel_or_skip()
    table = bits == 2
    cfg = _config(g, bits, n, k, m, block, group)
    assert cfg.span == 2
    f, words, r = _operands(bits, group, n, k, table, seed=5)
    x = _x(m, k, seed=5, dtype=torch.bfloat16)
    q, sx = x_int8_reference(x)
    if table:
        want = table_reference(f.packed, words, r, q, sx, bits)
        r = r.cuda()
    else:
        want = (q.double() * sx.double()[:, None]) @ f.dequantize(torch.float64).T
    out = g.coarse_wgmma(x.cuda(), f.packed.cuda(), words.cuda(), n=n, bits=bits, block=block, kcand=kcand,
                         write_logits=True, table_r=r)
    ck, _, ci, _, _, lg = (t.cpu() for t in out)
    assert not torch.isnan(lg).any() and not torch.isnan(ck).any()
    assert rel_err(lg, want) < 1e-6
    cands = ref.block_candidates_reference(lg, None, block=block, kcand=kcand, write_logits=False)
    assert torch.equal(ck, cands.cand_key) and torch.equal(ci, cands.cand_idx)


def _ordered_bits(key: torch.Tensor) -> torch.Tensor:
    """``wgmma_emit._ordered_bits`` in torch: int32 whose order is the fp32 order (-0.0 -> 0)."""
    bits = torch.where(key == 0, torch.zeros_like(key), key).view(torch.int32)
    return torch.where(bits < 0, bits ^ 0x7FFFFFFF, bits)


def _sorted_heads_mirror(key: torch.Tensor, tok: torch.Tensor, big: int, kcand: int):
    """``wgmma_emit._sorted_heads_rounds`` step by step in torch on a [128, NB] tile: thread l
    holds tokens 4 l .. 4 l + 3 of a column, sorts them (the same 5 compare-exchanges), then each
    round takes the best head (lowest token among equal keys), pops it -- over the keys'
    order-preserving int32 bits, converted back to fp32 when stored. Returns (keys, tokens)
    [kcand, NB] as the kernel stores them (token 0 where the key is -inf)."""
    key, neg = _ordered_bits(key), int(_ordered_bits(torch.tensor(float("-inf"))))
    v = [key.view(32, 4, -1)[:, j].clone() for j in range(4)]
    t = [tok.view(32, 4, -1)[:, j].clone() for j in range(4)]

    def order2(a, b):
        sw = (v[b] > v[a]) | ((v[b] == v[a]) & (t[b] < t[a]))
        v[a], v[b] = torch.where(sw, v[b], v[a]), torch.where(sw, v[a], v[b])
        t[a], t[b] = torch.where(sw, t[b], t[a]), torch.where(sw, t[a], t[b])

    for a, b in ((0, 1), (2, 3), (0, 2), (1, 3), (1, 2)):
        order2(a, b)
    keys, toks = [], []
    for _ in range(kcand):
        best = v[0].max(dim=0).values
        loc = torch.where(v[0] == best, t[0], torch.full_like(t[0], big)).min(dim=0).values
        best = torch.where(best < 0, best ^ 0x7FFFFFFF, best).view(torch.float32)  # the map is its own inverse
        keys.append(best)
        toks.append(torch.where(best == float("-inf"), torch.zeros_like(loc), loc))
        win = t[0] == loc
        for j in range(3):
            v[j], t[j] = torch.where(win, v[j + 1], v[j]), torch.where(win, t[j + 1], t[j])
        v[3] = torch.where(win, torch.full_like(v[3], neg), v[3])
        t[3] = torch.where(win, torch.full_like(t[3], big), t[3])
    return torch.stack(keys), torch.stack(toks)


@pytest.mark.parametrize("kcand", [1, 4, 8, 16])
def test_sorted_heads_rounds_mirror_matches_max_and_mask(kcand):
    """The sorted-heads candidate rounds (over the keys' int32 bits, as the kernel runs them) pick
    exactly the keys and tokens of successive max-and-mask (ties to the lower token, -inf past N
    giving token 0): keys on a coarse grid (many ties, within and across threads), a column of
    equal keys, a column of zeros of both signs (equal keys), a column of negatives only, -inf
    tails, kcand beyond a thread's 4 tokens."""
    torch.manual_seed(kcand)
    nb, row0, n = 8, 256, 256 + 100
    key = torch.randint(-6, 6, (128, nb)).float() / 4
    key[:, 3] = 0.5  # every key equal
    key[:, 5] = torch.where(torch.rand(128) < 0.5, -0.0, 0.0)  # +0.0 and -0.0: all equal
    key[:, 6] = -torch.rand(128) - 1e-3  # negatives only
    tok = (row0 + torch.arange(128))[:, None].expand(128, nb).contiguous()
    key = torch.where(tok < n, key, torch.full_like(key, float("-inf")))
    got_k, got_t = _sorted_heads_mirror(key, tok, n + 128, kcand)
    k, t = key.clone(), tok
    for c in range(kcand):
        best = k.max(dim=0).values
        loc = torch.where(k == best, t, torch.full_like(t, n + 128)).min(dim=0).values
        assert torch.equal(got_k[c], best)
        assert torch.equal(got_t[c], torch.where(best == float("-inf"), torch.zeros_like(loc), loc))
        k = torch.where(t == loc, torch.full_like(k, float("-inf")), k)


@pytest.mark.cuda
@pytest.mark.parametrize("bits,group,n,k,m,block,kcand", CASES)
def test_cuda_coarse_wgmma_epilogue_forms(poison_empty, bits, group, n, k, m, block, kcand):
    """The candidate epilogues -- sorted per-thread heads over the keys' int32 bits (blocks of 128
    tokens), max-and-mask rounds over them (64) and over the fp32 keys (two blocks a program) --
    emit exactly the candidates of the per-block reference over the kernel's own logits with many
    equal logits (ties to the lower index, -inf past N), per group (INT4) and whole-row (INT2);
    kcand up to 64 (more than a thread's 4 tokens, so threads run dry)."""
    g = _kernel_or_skip()
    table = bits == 2
    w = torch.randn(n, k) * 0.05
    w[5:9] = w[1]  # equal rows: equal coarse logits, the lower token first
    f = INTx.quantize(w, bits=bits, group_size=group)
    x = _x(m, k, seed=7, dtype=torch.bfloat16)
    if table:
        words, r = wgmma_table(f.scale, f.zero, bits, group, f.packed.shape[1])
        r = r.cuda()
    else:
        words, r = wgmma_sz(f.scale, f.zero, bits, group, f.packed.shape[1]), None
    out = g.coarse_wgmma(x.cuda(), f.packed.cuda(), words.cuda(), n=n, bits=bits, block=block, kcand=kcand,
                         write_logits=True, table_r=r)
    ck, _, ci, _, _, lg = (t.cpu() for t in out)
    assert not torch.isnan(lg).any() and not torch.isnan(ck).any()
    cands = ref.block_candidates_reference(lg, None, block=block, kcand=kcand, write_logits=False)
    assert torch.equal(ck, cands.cand_key) and torch.equal(ci, cands.cand_idx)


def _spy_ws_grids(monkeypatch, g) -> list:
    """Record the grid of every warp-specialized launch (the kernel stays the real one)."""
    seen = []
    real = g._coarse_ws_kernel

    class Spy:
        def __getitem__(self, grid):
            def launch(*a, **kw):
                seen.append((grid[0], kw["PARTS"]))
                return real[grid](*a, **kw)
            return launch

    monkeypatch.setattr(g, "_coarse_ws_kernel", Spy())
    return seen


@pytest.mark.cuda
@pytest.mark.parametrize("n,m", [(140 * 128 - 37, 1), (140 * 128 - 37, 13), (20 * 128, 5)])
def test_cuda_coarse_wgmma_split_tail(poison_empty, monkeypatch, n, m):
    """The whole-row variant's last row blocks split in shares of their stages (``SPLIT_TAIL``) give
    the candidates and logits of the unsplit launch bit for bit (int32 sums; the shares are added
    in share order, so a second call is bit-identical too). 140 blocks on 132 SMs: 132 whole and 8
    split; 20 blocks: all split; unsplit: one "SM" (no remainder). The tickets are left at zero for
    the next call."""
    g = _kernel_or_skip()
    seen = _spy_ws_grids(monkeypatch, g)
    bits, group, k, kcand = 2, 64, 2048, 8
    f, words, r = _operands(bits, group, n, k, True, seed=3)
    x = _x(m, k, seed=3, dtype=torch.bfloat16).cuda()
    args = (x, f.packed.cuda(), words.cuda())
    kw = dict(n=n, bits=bits, block=128, kcand=kcand, write_logits=True, table_r=r.cuda())
    monkeypatch.setattr(g, "sm_count", lambda device, interpret: 1)
    base = [t.cpu() for t in g.coarse_wgmma(*args, **kw)]
    monkeypatch.setattr(g, "sm_count", lambda device, interpret: 132)
    split = [t.cpu() for t in g.coarse_wgmma(*args, **kw)]
    again = [t.cpu() for t in g.coarse_wgmma(*args, **kw)]
    blocks, (parts, _) = -(-n // 128), g.SPLIT_TAIL
    assert seen[0] == (blocks, 1) and seen[1] == (blocks + (blocks % 132) * (parts - 1), parts)
    assert not torch.isnan(split[5]).any() and not torch.isnan(split[0]).any()
    assert all(torch.equal(a, b) for a, b in zip(split, base) if a.numel())
    assert all(torch.equal(a, b) for a, b in zip(split, again) if a.numel())
    from lowbit.ops.coarse_head.scratch import stream_key

    assert not g._TICKETS[stream_key(x.device)].any()


@pytest.mark.cuda
@pytest.mark.parametrize("table", [False, True])
@pytest.mark.parametrize("n,k,m", [
    (140 * 128 - 37, 2048, 1),  # the whole-row split tail: its programs' first ring issued before the wait
    (140 * 128 - 37, 2048, 3), (2000, 1024, 13),
    (700, 256, 4),  # fewer stages than the ring (INT2: 1, INT4: 2)
    (900, 1024, 40),  # NB = 64 on the single-partition kernel (INT2, 4 stages) / spanning (INT4, 8)
    (2900, 2048, 40)])  # spanning, an odd block count
def test_cuda_coarse_wgmma_graph_replay_reads_fresh_x(poison_empty, monkeypatch, table, n, k, m):
    """Under CUDA-graph replay with fresh x the pass gives bit for bit the eager outputs for that x:
    the weight stages of the first ring go out before the PDL wait, the x tiles after it, so every
    replay reads the new x -- per group (INT4) and whole-row (INT2), through the split tail, short
    rings, the single-partition kernel and spanning programs."""
    g = _kernel_or_skip()
    monkeypatch.setattr(g, "sm_count", lambda device, interpret: 132)
    bits, group, kcand = 2 if table else 4, 64, 8
    f, words, r = _operands(bits, group, n, k, table, seed=5)
    args = (f.packed.cuda(), words.cuda())
    kw = dict(n=n, bits=bits, block=128, kcand=kcand, write_logits=True, table_r=None if r is None else r.cuda())
    x_in = _x(m, k, seed=5, dtype=torch.bfloat16).cuda()
    g.coarse_wgmma(x_in, *args, **kw)  # compile and warm up outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = g.coarse_wgmma(x_in, *args, **kw)
    for seed in (11, 12):
        x_new = _x(m, k, seed=seed, dtype=torch.bfloat16).cuda()
        x_in.copy_(x_new)
        graph.replay()
        want = [t.cpu() for t in g.coarse_wgmma(x_new, *args, **kw)]
        assert not torch.isnan(out[5]).any()
        assert all(torch.equal(a.cpu(), b) for a, b in zip(out, want) if b.numel())


def test_split_launch_plan_and_buffers(monkeypatch):
    """The split tail's plan (``_split_launch``; two SMs stand for the GPU's on CPU tensors): the
    ``blocks % (unit x SMs)`` last blocks split, nothing where there is no remainder, too few
    stages or fewer than two parts; the int32 scratch and tickets kept per device (no allocation
    per call, grown when a launch needs more)."""
    from lowbit.ops.coarse_head import scratch

    g = _gluon_or_skip()
    dev = torch.device("cpu")
    # fresh per-device states, and the scratch this test outgrows retired into a list of its own
    monkeypatch.setattr(g, "_PARTS", {})
    monkeypatch.setattr(g, "_TICKETS", {})
    monkeypatch.setattr(scratch, "_RETIRED", [])
    full, parts, part, tick = g._split_launch(5, 8, 128, 8, dev, (2, 1))
    assert (full, parts) == (4, 2) and part.dtype == torch.int32 and part.numel() >= 2 * 128 * 8
    assert tick.dtype == torch.int32 and not tick.any() and tick.numel() >= 1
    full2, _, part2, tick2 = g._split_launch(7, 8, 128, 16, dev, (2, 2))  # 7 % 4 = 3 blocks split
    assert full2 == 4 and part2.numel() >= 3 * 2 * 128 * 16
    assert part2.data_ptr() != part.data_ptr() and tick2 is tick  # the scratch grew, the tickets served
    _, _, part3, _ = g._split_launch(5, 8, 128, 8, dev, (2, 1))
    assert part3 is g._PARTS[scratch.stream_key(dev)]  # the grown scratch serves the smaller launch
    for args in ((4, 8, (2, 1)), (5, 3, (2, 1)), (5, 8, (1, 1)), (5, 8, (0, 1))):
        assert g._split_launch(args[0], args[1], 128, 8, dev, args[2]) == (args[0], 1, None, None)


# (bits, M, N, K, block) -> (kernel, NB, span, stages, maxnreg, split): both heads the docs time,
# every M band, both blocks
ROUTES = [
    ((2, 1, 124160, 5120, 128), ("ws", 8, 1, 4, 56, (2, 1))),
    ((2, 16, 124160, 5120, 128), ("ws", 16, 1, 4, 56, (2, 1))),
    ((2, 17, 124160, 5120, 128), ("ws", 32, 1, 4, 80, None)),
    ((2, 64, 124160, 5120, 128), ("ws", 64, 2, 4, 96, None)),
    ((2, 33, 124160, 5120, 64), ("ws", 64, 2, 4, 96, None)),
    ((4, 1, 124160, 5120, 128), ("ws", 8, 1, 4, 80, None)),
    ((4, 9, 124160, 5120, 128), ("ws", 16, 1, 4, 56, None)),
    ((4, 64, 124160, 5120, 128), ("ws", 64, 2, 4, 96, None)),
    ((2, 1, 49152, 576, 128), ("ws", 8, 1, 4, 64, (2, 1))),
    ((2, 16, 49152, 576, 64), ("ws", 16, 1, 4, 80, (2, 1))),
    ((2, 64, 49152, 576, 128), ("single", 64, 1, 3, None, None)),
    ((4, 16, 49152, 576, 128), ("ws", 16, 1, 4, 80, None)),
    ((4, 33, 49152, 576, 64), ("single", 64, 1, 3, 128, None)),
]


@pytest.mark.parametrize("case,want", ROUTES)
def test_launch_config_routes(case, want):
    """Which kernel, NB, span, ring, register cap and split tail each call gets (the tables of
    ``wgmma_int8``), and the settings that follow from them."""
    g = _gluon_or_skip()
    bits, m, n, k, block = case
    cfg = _config(g, bits, n, k, m, block)
    assert (cfg.kernel, cfg.nb, cfg.span, cfg.stages, cfg.maxnreg, cfg.split) == want
    assert cfg.table == (bits == 2)  # INT2: the whole-row variant
    assert cfg.rows == block * cfg.span and cfg.programs == -(-n // cfg.rows)
    assert cfg.num_warps == cfg.rows // 16
    assert cfg.pdl == (cfg.kernel == "ws") and cfg.late == (cfg.kernel == "ws" and cfg.nb >= g.LATE_TRIGGER_MIN_NB)
    assert cfg.pipe == (bits == 4 and cfg.kernel == "ws" and cfg.nb in g.WS_PIPE_GROUP)
    assert cfg.magic == (bits == 4 and cfg.kernel == "ws" and cfg.nb in g.WS_MAGIC_GROUP_NB)


def _record_launches(monkeypatch, g, bits, m, n, k, block):
    """[(kernel, grid, kwargs)] that ``coarse_wgmma`` makes (Gluon does not run here: the kernels are
    recorded; the x preparation runs, its kernel recorded too)."""
    seen = []

    class Recorder:
        def __init__(self, name):
            self.name = name

        def __getitem__(self, grid):
            return lambda *a, **kw: seen.append((self.name, grid, kw))

    for name in ("_coarse_ws_kernel", "_coarse_wgmma_kernel"):
        monkeypatch.setattr(g, name, Recorder(name))
    monkeypatch.setattr(x_int8, "_x_int8_kernel", Recorder("_x_int8_kernel"))
    monkeypatch.setattr(g, "sm_count", lambda device, interpret: 132)
    ell = INTx.quantize(torch.zeros(1, k), bits=bits, group_size=64).packed.shape[1]
    packed = torch.empty(n, ell, dtype=torch.uint8)
    if bits == 2:
        sz, r = torch.empty(2 * (ell // 64), -(-n // 4) * 4, dtype=torch.int32), torch.empty(n)
    else:
        sz, r = torch.empty(wgmma_sz_bytes(n, bits, ell), dtype=torch.uint8), None
    g.coarse_wgmma(torch.empty(m, k, dtype=torch.bfloat16), packed, sz, n=n, bits=bits, block=block, kcand=8,
                   write_logits=False, table_r=r)
    return seen, g.launch_config(bits, m, n, ell, block)


@pytest.mark.parametrize("case", [c for c, _ in ROUTES])
def test_launcher_follows_launch_config(monkeypatch, case):
    """What the launcher hands the kernels (recorded on CPU stand-ins; 132 SMs) is what
    ``launch_config`` says: the kernel, grid (a split tail's shares added), NB, ring, register cap,
    warps and the per-group settings."""
    g = _gluon_or_skip()
    seen, cfg = _record_launches(monkeypatch, g, *case)
    (prep, prep_grid, prep_kw), (kern, (grid,), kw) = seen
    assert prep == "_x_int8_kernel" and prep_grid[0] == cfg.nb and prep_kw["PERM"] == cfg.table
    assert kern == ("_coarse_ws_kernel" if cfg.kernel == "ws" else "_coarse_wgmma_kernel")
    assert kw["NB"] == cfg.nb and kw["STAGES"] == cfg.stages and kw["W"] == cfg.rows // 16
    assert kw["num_warps"] == cfg.num_warps and kw.get("maxnreg") == cfg.maxnreg
    assert kw["TABLE"] == cfg.table
    if cfg.kernel == "single":
        assert grid == cfg.programs and "launch_pdl" not in kw
        return
    parts = kw["PARTS"]
    assert grid == kw["FULL"] + (cfg.programs - kw["FULL"]) * parts and kw["launch_pdl"]
    ns = INTx.quantize(torch.zeros(1, case[3]), bits=case[0], group_size=64).packed.shape[1] // 64
    # a split needs a remainder past the SMs and two stages a share (49152 x 576 INT2: 3 stages, none)
    assert parts == (cfg.split[0] if cfg.split and cfg.programs % 132 and ns >= 2 * cfg.split[0] else 1)
    assert (kw["SUB"], kw["LATE"], kw["PIPE"], kw["MAGIC"]) == (cfg.span, cfg.late, cfg.pipe, cfg.magic)


def test_coarse_wgmma_validates_words():
    """Per-group words of the wrong shape / dtype are a ValueError before any launch (on any
    device)."""
    g = _gluon_or_skip()
    f = INTx.quantize(torch.randn(10, 256), bits=4, group_size=64)
    words = wgmma_sz(f.scale, f.zero, 4, 64, f.packed.shape[1])
    for bad in (torch.zeros(10, 8, dtype=torch.int32), words[:-16].contiguous(), words.view(torch.int8),
                words.view(-1, 16)):
        with pytest.raises(ValueError, match="wgmma_sz's uint8 buffer"):
            g.coarse_wgmma(torch.randn(2, 256), f.packed, bad, n=10, bits=4, block=128, kcand=1, write_logits=False)


@pytest.mark.cuda
def test_cuda_coarse_wgmma_fresh_inputs_and_zero_rows():
    """Back-to-back calls with new x (nothing cached from the last one); an all-zero row of x gives
    zero logits and candidates ordered by token index."""
    g = _kernel_or_skip()
    n, k = 515, 1024
    w = torch.randn(n, k) * 0.05
    f4 = INTx.quantize(w, bits=4, group_size=64)
    words = wgmma_sz(f4.scale, f4.zero, 4, 64, f4.packed.shape[1]).cuda()
    packed4 = f4.packed.cuda()
    f = INTx.quantize(w, bits=2, group_size=64)
    packed = f.packed.cuda()
    twords, tr = wgmma_table(f.scale, f.zero, 2, 64, f.packed.shape[1])
    for seed in range(3):
        x = _x(6, k, seed=seed)
        x[4] = 0
        lg = g.coarse_wgmma(x.cuda(), packed4, words, n=n, bits=4, block=128, kcand=4, write_logits=True)[5].cpu()
        q, sx = x_int8_reference(x)
        assert rel_err(lg, (q.double() * sx.double()[:, None]) @ f4.dequantize(torch.float64).T) < 1e-6
        assert (lg[4] == 0).all()
        lt = g.coarse_wgmma(x.cuda(), packed, twords.cuda(), n=n, bits=2, block=128, kcand=4, write_logits=True,
                            table_r=tr.cuda())[5].cpu()
        assert rel_err(lt, table_reference(f.packed, twords, tr, q, sx, 2)) < 1e-6
        assert (lt[4] == 0).all()


@pytest.mark.cuda
@pytest.mark.parametrize("bits,table,m", [(2, True, 40), (2, True, 24), (4, False, 40), (4, False, 24)])
def test_cuda_draft_head_dispatches_and_stays_exact(bits, table, m, monkeypatch):
    """A fast DraftHead on the int8-wgmma pass (INT2: the whole-row variant; INT4 per group; M = 24 on the warp-specialized kernel, NB = 32; M = 40 with K = 1024 the single-partition
    kernel for INT2 (4 stages), a spanning program for INT4 (8 stages)): every row with a clear
    winner gets it, with exact values; the top-k values are the exact logits of the returned
    tokens; graph replay and torch.compile give the same answers."""
    _kernel_or_skip()
    from lowbit.ops.coarse_head import dispatch

    monkeypatch.setitem(dispatch.WGMMA_M_RANGE, bits, (1, 64))
    from lowbit.ops.coarse_head import wgmma_int8

    calls = []
    real_fn = wgmma_int8.coarse_wgmma

    def spy(*a, **kw):
        calls.append(a[0].shape[0])
        assert (kw.get("table_r") is not None) == table
        return real_fn(*a, **kw)

    monkeypatch.setattr(wgmma_int8, "coarse_wgmma", spy)
    n, k = 5000, 1024
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
