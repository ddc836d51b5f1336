"""Independent references for the format tests: ml_dtypes casts and fp64 formulas."""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import torch

E2M1_GRID = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def np32(x: torch.Tensor) -> np.ndarray:
    return x.detach().float().cpu().numpy()


def ml_e2m1_codes(x: torch.Tensor) -> torch.Tensor:
    """E2M1 codes (uint8) of fp32 values by ml_dtypes' float4_e2m1fn cast."""
    return torch.from_numpy(np32(x).astype(ml_dtypes.float4_e2m1fn).view(np.uint8).copy())


def ml_e4m3_bytes(x: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(np32(x).astype(ml_dtypes.float8_e4m3fn).view(np.uint8).copy())


def bits32(x: torch.Tensor) -> torch.Tensor:
    return x.float().contiguous().view(torch.int32)


def e2m1_value(code: int) -> float:
    """fp64 value of a 4-bit code from its bit fields s e1 e0 m (not from a table)."""
    s, e, m = (code >> 3) & 1, (code >> 1) & 3, code & 1
    mag = (m * 0.5) if e == 0 else (1 + m * 0.5) * 2.0 ** (e - 1)
    return -mag if s else mag


def nibbles_ref(packed: torch.Tensor) -> np.ndarray:
    """Unpack bytes [R, C] to codes [R, 2C] with plain Python loops (element 2i = low nibble)."""
    p = packed.cpu().numpy()
    out = np.zeros((p.shape[0], p.shape[1] * 2), dtype=np.int64)
    for r in range(p.shape[0]):
        for c in range(p.shape[1]):
            out[r, 2 * c] = int(p[r, c]) & 0xF
            out[r, 2 * c + 1] = int(p[r, c]) >> 4
    return out


def e2m1_decode_ref(packed: torch.Tensor) -> np.ndarray:
    codes = nibbles_ref(packed)
    lut = np.array([e2m1_value(c) for c in range(16)])
    return lut[codes]


def ceil_log2(x: float) -> int:
    """Exact ceil(log2(x)) for a positive finite fp64 x (frexp, no rounding)."""
    m, e = math.frexp(x)
    return e - 1 if m == 0.5 else e


def floor_log2(x: float) -> int:
    m, e = math.frexp(x)
    return e - 1
