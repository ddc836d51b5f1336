"""Launch options shared by the Triton decode kernels that can run as a programmatic dependent
launch (PDL) or with extra ptxas options (``gathered/mma_nvfp4.py``, ``fp8_gemm/mma_gemv.py``,
``act_quant``, ``coarse_head``).

A kernel taking part declares ``PDL`` / ``TRIGGER`` constexprs (default False) and, under ``PDL``,
calls ``triton.language.extra.cuda.gdc_wait()`` before any global access (then, under
``TRIGGER``, ``gdc_launch_dependents()``); the Gluon kernels use ``lowbit/ops/_gluon_pdl.py``."""
from __future__ import annotations

import torch

from lowbit._backend import capability_at_least, interpret_mode

__all__ = ["launch_options"]


def launch_options(device: torch.device, pdl: bool, trigger: bool, ptxas: str | None) -> dict:
    """Extra keyword arguments of such a kernel's launch: ``PDL`` / ``TRIGGER`` and
    ``launch_pdl=True`` when ``pdl`` (on sm_90 and later only, where ``griddepcontrol`` exists),
    ``ptx_options`` when ``ptxas``; nothing under the interpreter."""
    if interpret_mode():
        return {}
    opts = {}
    if pdl and capability_at_least(device, (9, 0)):
        opts.update(PDL=True, TRIGGER=bool(trigger), launch_pdl=True)
    if ptxas:
        opts["ptx_options"] = ptxas
    return opts
