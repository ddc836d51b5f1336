"""FP4 weights re-encoded as block-scaled FP8, for ``fp4_gemm`` at prefill sizes.

At large M the GEMM is compute-bound and the FP8 GEMM (``lowbit/ops/fp8_gemm``) runs at the tensor
cores' pace, while the fused FP4 kernel pays its per-32 scale handling on every tile (docs/gemm.md). So there the weight is first re-encoded once per
call -- packed E2M1 ``[N, K/2]`` + UE8M0 ``[N, K/32]`` into E4M3 ``[N, K]`` + fp32 ``[N/128, K/128]``
block scales, exact -- and the FP8 GEMM does the rest. The extra traffic (read K/2 + write K bytes a
row, then the GEMM reads K instead of K/2) is small next to a prefill GEMM's time.

Exactness (``reference.fp4_weight_to_fp8_ref`` is the definition): a block's scale is
``2^(E - 133)`` with E its largest scale byte, and a group with byte e stores
``e2m1 * 2^(6 - (E - e))``; every such value is an E4M3 value while ``E - e <= 14``
(``FAR_SHIFT``). A group further below (with a nonzero code) or a 255 (NaN) scale byte sets the
``bad`` flag, and the fused kernel's result replaces the FP8 GEMM's (``dispatch.fp4_via_fp8``: a
guarded launch that reads the flag on the device). Real checkpoints' scales within a 128 x
128 block span a few binades, so the flag is a guard, not the common case.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from lowbit.ops.fp4_gemm.reference import FAR_SHIFT

__all__ = ["fp4_weight_to_fp8"]


@triton.jit
def _expand_kernel(b_ptr, bs_ptr, q_ptr, qs_ptr, bad_ptr, N, K, FAR: tl.constexpr):
    """Program (i, j): weight rows 128 i .. 128 i + 127, K block j. ``b_ptr`` uint8 [N, K/2]
    (element 2c in the low nibble of byte c); ``bs_ptr`` uint8 [N, K/32]; ``q_ptr`` uint8 (E4M3
    bits) [N, K]; ``qs_ptr`` fp32 [cdiv(N, 128), K/128]; ``bad_ptr`` int32 [1] (set to 1, never
    cleared). Integer arithmetic only, code by code (subnormal results and the far-group flag
    included): the interpreter gives the same bits. The kernel is bound by its instruction count
    (about 27 a stored byte on sm_90), not by memory (docs/gemm.md)."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    rows = pid_n * 128 + tl.arange(0, 128)
    rmask = rows < N
    r64 = rows.to(tl.int64)[:, None]
    g = tl.arange(0, 4)
    e = tl.load(bs_ptr + r64 * (K // 32) + pid_k * 4 + g[None, :], mask=rmask[:, None], other=0).to(tl.int32)
    nan_byte = (e == 255) & rmask[:, None]
    big = tl.max(tl.max(tl.where(e == 255, 0, e), axis=1), axis=0)  # the block's largest byte E
    shift = big - e  # [128, 4] d of each group
    c = tl.arange(0, 64)
    byt = tl.load(b_ptr + r64 * (K // 2) + pid_k * 64 + c[None, :], mask=rmask[:, None], other=0).to(tl.int32)
    codes = tl.reshape(tl.join(byt & 15, byt >> 4), [128, 4, 32])  # k = 2 c + nibble
    # nonzero E2M1 magnitude = (1 + mm / 2) 2^p: code s e1 e0 m -> ce = e1 e0; ce = 0: 0.5 (m = 1)
    ce = (codes >> 1) & 3
    mm = tl.where(ce == 0, 0, codes & 1)
    p = tl.where(ce == 0, -1, ce - 1)
    t = p + 6 - shift[:, :, None]  # E4M3 exponent of the stored value
    normal = ((t + 7) << 3) | (mm << 2)
    sub = ((2 + mm) << 1) >> tl.minimum(tl.maximum(-7 - t, 0), 31)  # t = -7, -8, -9: 2^-9 units
    mag = tl.where(t >= -6, normal, sub)
    zero = (codes & 7) == 0
    bits = tl.where(zero, 0, mag) | ((codes & 8) << 4)
    far = tl.max(tl.where(zero, 0, 1), axis=2) * (shift > FAR) * rmask[:, None]  # [128, 4]
    bad = tl.max(tl.max(far + nan_byte.to(tl.int32), axis=1), axis=0)
    k = tl.arange(0, 128)
    tl.store(q_ptr + r64 * K + pid_k * 128 + k[None, :], tl.reshape(bits, [128, 128]).to(tl.uint8),
             mask=rmask[:, None])
    if bad > 0:
        tl.store(bad_ptr, 1)
    # 2^(E - 133) as fp32 bits: normal for E >= 7, subnormal (1 << (E + 16)) below
    sbits = tl.where(big >= 7, (big - 6) << 23, 1 << tl.minimum(big + 16, 30))
    tl.store(qs_ptr + pid_n * (K // 128) + pid_k, sbits.to(tl.float32, bitcast=True))


def fp4_weight_to_fp8(b: torch.Tensor, b_s: torch.Tensor):
    """uint8 b [N, K/2], uint8 b_s [N, K/32] (contiguous, K % 128 == 0) -> (q float8_e4m3fn [N, K],
    qs fp32 [cdiv(N, 128), K/128], bad int32 [1] on the device: nonzero when the expansion is not
    exact, see the module docstring). One launch, no host synchronization."""
    n, k = b.shape[0], b.shape[1] * 2
    q = torch.empty(n, k, dtype=torch.uint8, device=b.device)
    qs = torch.empty(triton.cdiv(n, 128), k // 128, dtype=torch.float32, device=b.device)
    bad = torch.zeros(1, dtype=torch.int32, device=b.device)
    _expand_kernel[(triton.cdiv(n, 128), k // 128)](b, b_s, q, qs, bad, n, k, FAR=FAR_SHIFT, num_warps=8)
    return q.view(torch.float8_e4m3fn), qs, bad
