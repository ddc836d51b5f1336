"""The launch options of the Triton kernels that can run as a programmatic dependent launch
(``lowbit/ops/_triton_pdl.py``): what each switch adds, and nothing under the interpreter or
before sm_90 (no GPU needed: the device checks are stubbed)."""
from __future__ import annotations

import torch

from lowbit.ops import _triton_pdl


def test_launch_options(monkeypatch):
    dev = torch.device("cuda", 0)
    monkeypatch.setattr(_triton_pdl, "interpret_mode", lambda: False)
    monkeypatch.setattr(_triton_pdl, "capability_at_least", lambda d, cap: True)
    assert _triton_pdl.launch_options(dev, False, True, None) == {}
    assert _triton_pdl.launch_options(dev, True, False, None) == {"PDL": True, "TRIGGER": False, "launch_pdl": True}
    assert _triton_pdl.launch_options(dev, True, True, "-O1") == {"PDL": True, "TRIGGER": True, "launch_pdl": True,
                                                                   "ptx_options": "-O1"}
    monkeypatch.setattr(_triton_pdl, "capability_at_least", lambda d, cap: False)  # before sm_90: no PDL
    assert _triton_pdl.launch_options(dev, True, True, "-O1") == {"ptx_options": "-O1"}
    monkeypatch.setattr(_triton_pdl, "interpret_mode", lambda: True)
    assert _triton_pdl.launch_options(dev, True, True, "-O1") == {}
