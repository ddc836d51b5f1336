"""FP4 weights re-encoded as block-scaled FP8, for ``fp4_gemm`` at prefill sizes.

At large M the GEMM is compute-bound and the FP8 GEMM (``lowbit/ops/fp8_gemm``) runs at the tensor
cores' pace, while the fused FP4 kernel pays its per-32 scale handling on every tile (H200: 0.18-0.20x
FP8 ``_scaled_mm`` at M = 512 / 4096, docs/gemm.md). So there the weight is first re-encoded once per
call -- packed E2M1 ``[N, K/2]`` + UE8M0 ``[N, K/32]`` into E4M3 ``[N, K]`` + fp32 ``[N/128, K/128]``
block scales, exact -- and the FP8 GEMM does the rest. The extra traffic (read K/2 + write K bytes a
row, then the GEMM reads K instead of K/2) is small next to a prefill GEMM's time.

Exactness (``reference.fp4_weight_to_fp8_ref`` is the definition): a block's scale is
``2^(E - 133)`` with E its largest scale byte, and a group with byte e stores
``e2m1 * 2^(6 - (E - e))``; every such value is an E4M3 value while ``E - e <= 14``
(``FAR_SHIFT``). A group further below (with a nonzero code) or a 255 (NaN) scale byte sets the
``bad`` flag, and the caller uses the fused kernel instead. Real checkpoints' scales within a 128 x
128 block span a few binades, so the flag is a guard, not the common case.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from lowbit.ops.fp4_gemm.reference import FAR_SHIFT

__all__ = ["fp4_weight_to_fp8"]


@triton.jit
def _e4m3_bits(codes, shift):
    """E4M3 bits (int32) of ``e2m1(codes) * 2^(6 - shift)``, exact while shift <= FAR_SHIFT:
    a nonzero E2M1 magnitude is ``(1 + mm/2) 2^p`` (code ``s e1 e0 m``: e1 e0 = 0 is 0.5, m = 1),
    stored at E4M3 exponent ``t = p + 6 - shift`` -- normal from t = -6, 2^-9 units below."""
    ce = (codes >> 1) & 3
    mm = tl.where(ce == 0, 0, codes & 1)
    t = tl.where(ce == 0, -1, ce - 1) + 6 - shift
    normal = ((t + 7) << 3) | (mm << 2)
    sub = ((2 + mm) << 1) >> tl.minimum(tl.maximum(-7 - t, 0), 31)
    mag = tl.where((codes & 7) == 0, 0, tl.where(t >= -6, normal, sub))
    return mag | ((codes & 8) << 4)


@triton.jit
def _expand_kernel(b_ptr, bs_ptr, q_ptr, qs_ptr, bad_ptr, N, K, FAR: tl.constexpr):
    """Program (i, j): weight rows 128 i .. 128 i + 127, K block j. ``b_ptr`` uint8 [N, K/2]
    (element 2c in the low nibble of byte c), ``bs_ptr`` uint8 [N, K/32], ``q_ptr`` int16 [N, K/2]
    (E4M3 bits of elements 2c, 2c + 1 in the low, high byte of word c: the same bytes as e4m3
    [N, K]), ``qs_ptr`` fp32 [cdiv(N, 128), K/128], ``bad_ptr`` int32 [1] (set to 1, never
    cleared). Integer arithmetic only: the interpreter gives the same bits."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    rows = pid_n * 128 + tl.arange(0, 128)
    rmask = rows < N
    r64 = rows.to(tl.int64)[:, None]
    c = tl.arange(0, 64)[None, :]
    byt = tl.load(b_ptr + r64 * (K // 2) + pid_k * 64 + c, mask=rmask[:, None], other=0).to(tl.int32)
    # each byte's own group scale (4 distinct bytes a row; the repeats hit L1)
    e = tl.load(bs_ptr + r64 * (K // 32) + pid_k * 4 + c // 16, mask=rmask[:, None], other=0).to(tl.int32)
    big = tl.max(tl.max(tl.where(e == 255, 0, e), axis=1), axis=0)  # the block's largest byte E
    shift = big - e
    lo = byt & 15
    hi = byt >> 4
    word = _e4m3_bits(lo, shift) | (_e4m3_bits(hi, shift) << 8)
    tl.store(q_ptr + r64 * (K // 2) + pid_k * 64 + c, word.to(tl.int16), mask=rmask[:, None])
    far = ((byt & 0x77) != 0) & (shift > FAR)
    bad = tl.max(tl.max((far | (e == 255)) & rmask[:, None], axis=1), axis=0)
    if bad:
        tl.store(bad_ptr, 1)
    # 2^(E - 133) as fp32 bits: normal for E >= 7, subnormal (1 << (E + 16)) below
    sbits = tl.where(big >= 7, (big - 6) << 23, 1 << tl.minimum(big + 16, 30))
    tl.store(qs_ptr + pid_n * (K // 128) + pid_k, sbits.to(tl.float32, bitcast=True))


def fp4_weight_to_fp8(b: torch.Tensor, b_s: torch.Tensor):
    """uint8 b [N, K/2], uint8 b_s [N, K/32] (contiguous, K % 128 == 0) -> (q float8_e4m3fn [N, K],
    qs fp32 [cdiv(N, 128), K/128], bad int32 [1] on the device: nonzero when the expansion is not
    exact, see the module docstring). One launch, no host synchronization."""
    n, k = b.shape[0], b.shape[1] * 2
    q = torch.empty(n, k // 2, dtype=torch.int16, device=b.device)
    qs = torch.empty(triton.cdiv(n, 128), k // 128, dtype=torch.float32, device=b.device)
    bad = torch.zeros(1, dtype=torch.int32, device=b.device)
    _expand_kernel[(triton.cdiv(n, 128), k // 128)](b, b_s, q, qs, bad, n, k, FAR=FAR_SHIFT, num_warps=4)
    return q.view(torch.float8_e4m3fn), qs, bad
