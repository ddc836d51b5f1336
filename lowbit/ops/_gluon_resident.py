"""How many CTAs of one compiled Gluon kernel variant an sm_90 GPU holds at once.

Kernels whose CTAs wait on each other (a split-K or stream-K reducer polling its partners'
counters) are safe only when the whole grid is resident; their launchers compare the grid against
:func:`resident_ctas` first."""
from __future__ import annotations

import torch

__all__ = ["resident_ctas"]

_RESIDENT: dict = {}


def resident_ctas(kernel, device: torch.device, args: tuple, meta: dict, warps: int) -> int:
    """CTAs of ``kernel`` compiled for ``args`` / ``meta`` (``num_warps`` = ``warps``) that fit on
    the GPU at once: registers, shared memory and threads per SM from the compiled kernel, times
    the SM count. Cached per variant (the meta-parameters and the last argument's value)."""
    key = (kernel, device.index, tuple(sorted(meta.items())), args[-1])
    if key not in _RESIDENT:
        kern = kernel.warmup(*args, grid=(1, 1), **meta)
        kern._init_handles()  # loads the module: n_regs is known from here
        props = torch.cuda.get_device_properties(device)
        threads = 32 * warps
        regs = -(-max(kern.n_regs, 1) // 8) * 8  # allocation granularity
        by_regs = props.regs_per_multiprocessor // (regs * threads)
        by_smem = props.shared_memory_per_multiprocessor // (kern.metadata.shared + 1024)  # + the per-CTA reserve
        by_warps = props.max_threads_per_multi_processor // threads
        _RESIDENT[key] = props.multi_processor_count * max(0, min(by_regs, by_smem, by_warps, 32))
    return _RESIDENT[key]
