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
``bad`` flag, and the fused kernel's result replaces the FP8 GEMM's (``triton._fp4_via_fp8``: a
guarded launch that reads the flag on the device). Real checkpoints' scales within a 128 x
128 block span a few binades, so the flag is a guard, not the common case.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from lowbit.ops.fp4_gemm.reference import FAR_SHIFT

__all__ = ["fp4_weight_to_fp8"]


#: the shift (binades below the block's largest scale) up to which every nonzero stored value is a
#: normal E4M3 number: the smallest, 0.5 x 2^(6 - d), has exponent 5 - d >= -6
SWAR_MAX_SHIFT = 11
#: True: tiles whose groups all lie within SWAR_MAX_SHIFT binades of their block's largest scale
#: (all of a real checkpoint's) take the word-parallel path, :func:`_swar_words`; False: the per-code
#: path everywhere. Off: timed in the twenty-fourth session (call c, ``bench_fp4_expand.py --swar on``,
#: docs/measurements/2026-12-03_session24_c_fp4_expand.log) it is 1.31-1.49x *slower* than the
#: per-code path on all five benchmark weights (N7168 K16384 246 against 165-188 us, N2112 K7168 40
#: against 30), although its sm_90 build (``scripts/fp4_expand_offline.py``) executes 624
#: instructions a thread for a tile against 1696 (8 warps, no spills): the instruction count does
#: not bound the per-code kernel. Bit-exact in the interpreter tests, kept for the record.
SWAR = False


@triton.jit
def _swar_lanes(mag, sgn, jrep):
    """Four E4M3 bytes at once (one per byte lane of the uint32 words): the lane's E2M1 magnitude
    ``mag`` (0..7, its three bits ``e1 e0 m``) times 2^(j - 6), with ``jrep`` = (j << 3) in every lane
    (1 <= j <= 12), ``sgn`` = 0x80 in the negative lanes. ``mag << 2`` is the E4M3 byte
    ``0 0 0 e1 e0 m 0 0`` of the value times 2^-6 (E4M3 subnormal for e1 e0 = 0), so adding j to
    the exponent field gives value x 2^(j - 6) for e1 e0 >= 1; the 0.5 code (mag 1) also needs its
    mantissa bit cleared (it becomes the normal 2^(j - 7)), and zero lanes get nothing. No lane
    carries into the next: a lane stays below 0x80 (28 + 96) before the sign is or-ed in."""
    nz = ((mag + 0x7F7F7F7F) & 0x80808080) >> 7  # 1 in the nonzero lanes
    not_half = (mag ^ 0x01010101) + 0x7F7F7F7F  # bit 7 of a lane set unless mag == 1
    half = ((not_half ^ 0x80808080) >> 5) & 0x04040404  # 4 in the mag == 1 lanes
    return ((mag << 2) + (jrep & (nz * 0xFF)) - half) | sgn


@triton.jit
def _swar_words(w, shift):
    """uint32 words ``w`` (4 packed bytes = E2M1 codes 0..7 of one group, code 2i in the low nibble
    of byte i) and each word's group ``shift`` (0..SWAR_MAX_SHIFT) -> the two uint32 words of their
    8 E4M3 bytes in code order (``e2m1 * 2^(6 - shift)``)."""
    jrep = ((12 - shift) << 3).to(tl.uint32) * 0x01010101
    lo = _swar_lanes(w & 0x07070707, (w << 4) & 0x80808080, jrep)  # codes 0, 2, 4, 6
    hi = _swar_lanes((w >> 4) & 0x07070707, w & 0x80808080, jrep)  # codes 1, 3, 5, 7
    out0 = (lo & 0xFF) | ((hi & 0xFF) << 8) | ((lo & 0xFF00) << 8) | ((hi & 0xFF00) << 16)
    out1 = ((lo >> 16) & 0xFF) | ((hi >> 8) & 0xFF00) | ((lo >> 8) & 0xFF0000) | (hi & 0xFF000000)
    return out0, out1


@triton.jit
def _expand_kernel(b_ptr, b32_ptr, bs_ptr, q_ptr, q32_ptr, qs_ptr, bad_ptr, N, K, FAR: tl.constexpr,
                   SWAR_MAX: tl.constexpr, USE_SWAR: tl.constexpr):
    """Program (i, j): weight rows 128 i .. 128 i + 127, K block j. ``b_ptr`` uint8 [N, K/2]
    (element 2c in the low nibble of byte c) and ``b32_ptr`` the same bytes as int32 [N, K/8];
    ``bs_ptr`` uint8 [N, K/32]; ``q_ptr`` uint8 (E4M3 bits) [N, K] and ``q32_ptr`` the same as int32
    [N, K/4]; ``qs_ptr`` fp32 [cdiv(N, 128), K/128]; ``bad_ptr`` int32 [1] (set to 1, never
    cleared). Integer arithmetic only: the interpreter gives the same bits.

    A tile whose groups all sit within SWAR_MAX binades of the block's largest scale (every stored
    value a normal E4M3 number) is re-encoded four codes an instruction (:func:`_swar_words`);
    others code by code, subnormal results and the far-group flag included. H200 (twenty-third
    session, calls e / f), the code-by-code path everywhere: 27-158 us on the benchmark's weights,
    0.18-0.27 of copy bandwidth over the bytes moved, bound by its ~27 instructions a byte (sm_90
    SASS, 8 warps: 1752 a thread for a tile, 80 registers; 1672 and 64 registers since the flag is
    computed before the stores, not re-timed)."""
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
    if USE_SWAR:  # the tile's widest shift (rows past N and NaN bytes left out)
        spread = tl.max(tl.max(tl.where(rmask[:, None] & (e != 255), shift, 0), axis=1), axis=0)
    else:
        spread = SWAR_MAX + 1
    if USE_SWAR and spread <= SWAR_MAX:
        # the tile as [128 rows, 4 groups, 4 words]: word i of group g holds codes 8 (4 g + i) ..
        i = tl.arange(0, 4)
        word = (g[None, :, None] * 4 + i[None, None, :])
        m3 = rmask[:, None, None]
        w = tl.load(b32_ptr + r64[:, :, None] * (K // 8) + pid_k * 16 + word, mask=m3, other=0)
        out0, out1 = _swar_words(w.to(tl.uint32, bitcast=True), tl.minimum(tl.maximum(shift, 0), SWAR_MAX)[:, :, None])
        out = tl.join(out0, out1).to(tl.int32, bitcast=True)  # [128, 4, 4, 2]
        pair = tl.arange(0, 2)
        tl.store(q32_ptr + r64[:, :, None, None] * (K // 4) + pid_k * 32 + word[:, :, :, None] * 2 + pair[None, None, None, :],
                 out, mask=m3[:, :, :, None])
        bad = tl.max(tl.max(nan_byte.to(tl.int32), axis=1), axis=0)
    else:
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
    _expand_kernel[(triton.cdiv(n, 128), k // 128)](
        b, b.view(torch.int32), b_s, q, q.view(torch.int32), qs, bad, n, k, FAR=FAR_SHIFT,
        SWAR_MAX=SWAR_MAX_SHIFT, USE_SWAR=SWAR, num_warps=8)
    return q.view(torch.float8_e4m3fn), qs, bad
