"""Test tiers, one suite.

* reference: the pure-PyTorch path on CPU tensors (always runs).
* interpret: Triton kernels on CPU tensors under ``TRITON_INTERPRET=1`` (the CI tier). The
  variable must be set before Triton is imported, so it is set here, at conftest import, whenever
  no CUDA device is visible (importing torch does not import Triton).
* cuda: the same tests on a GPU (``-m cuda``), plus compile / opcheck / CUDA-graph checks.

Tests that run one computation on every tier take the ``backend`` fixture::

    def test_x(backend):
        x = torch.randn(4, 8, device=backend.device)
        with backend.active():
            out = lowbit.ops.something(x)
"""
from __future__ import annotations

import contextlib
import dataclasses
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

import lowbit  # noqa: E402
from lowbit._backend import interpret_mode, triton_available  # noqa: E402

settings.register_profile(
    "lowbit", deadline=None, max_examples=40, suppress_health_check=[HealthCheck.too_slow], derandomize=False
)
settings.load_profile("lowbit")

HAS_CUDA = torch.cuda.is_available()


@dataclasses.dataclass(frozen=True)
class Backend:
    """One tier: where the tensors live and which implementation runs."""

    name: str  # "reference" | "interpret" | "cuda"
    device: torch.device

    @property
    def is_triton(self) -> bool:
        return self.name in ("interpret", "cuda")

    def active(self):
        if self.name == "reference":
            return lowbit.backend("reference")
        if self.name == "interpret":
            return lowbit.backend("triton")
        return contextlib.nullcontext()


@pytest.fixture(
    params=[
        pytest.param("reference"),
        pytest.param("interpret", marks=pytest.mark.interpret),
        pytest.param("cuda", marks=pytest.mark.cuda),
    ]
)
def backend(request) -> Backend:
    device = torch.device("cuda") if request.param == "cuda" else torch.device("cpu")
    return Backend(request.param, device)


def pytest_collection_modifyitems(config, items):
    skip_cuda = pytest.mark.skip(reason="needs a CUDA GPU: this tier runs on the H200 (pytest -m cuda)")
    skip_interp = pytest.mark.skip(
        reason="interpreter tier: needs TRITON_INTERPRET=1 set before Triton is imported (conftest sets it when no GPU is visible)"
    )
    skip_no_triton = pytest.mark.skip(reason="triton is not installed")
    for item in items:
        if "cuda" in item.keywords and not HAS_CUDA:
            item.add_marker(skip_cuda)
        if "interpret" in item.keywords:
            if not triton_available():
                item.add_marker(skip_no_triton)
            elif not interpret_mode():
                item.add_marker(skip_interp)


@pytest.fixture(autouse=True)
def _seed_and_reset_backend():
    torch.manual_seed(0)
    previous = lowbit.get_backend()
    yield
    lowbit.set_backend(previous)


@pytest.fixture
def poison_empty(monkeypatch):
    """Every float buffer the op allocates starts as NaN (E4M3 0x7F, UE8M0 0xFF), so an unwritten
    element fails."""
    real_empty = torch.empty

    def nan_empty(*args, **kwargs):
        t = real_empty(*args, **kwargs)
        if t.dtype == torch.float8_e8m0fnu:
            t.view(torch.uint8).fill_(0xFF)
        elif t.is_floating_point():
            t.fill_(float("nan"))
        return t

    monkeypatch.setattr(torch, "empty", nan_empty)
