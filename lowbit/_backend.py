"""Which implementation an op runs: the Triton kernel or the pure-PyTorch reference.

Rules (every op's ``__init__.py`` asks :func:`use_triton`):

* ``"auto"`` (default): CUDA tensors run Triton, everything else runs the reference. A CPU
  tensor never reaches a Triton launch, even on a CUDA host.
* ``"reference"``: always the reference (useful to compare on the GPU).
* ``"triton"``: always Triton. CPU tensors are only accepted when ``TRITON_INTERPRET=1`` was set
  before Triton was imported (the interpreter tier of the test-suite); otherwise ``ValueError``.

Select with ``lowbit.set_backend(name)``, the context manager ``with lowbit.backend(name):``, or
the environment variable ``LOWBIT_BACKEND``.
"""
from __future__ import annotations

import contextlib
import functools
import os
from typing import Iterator

import torch

_VALID = ("auto", "reference", "triton")
_current = os.environ.get("LOWBIT_BACKEND", "auto")
if _current not in _VALID:
    raise ValueError(f"LOWBIT_BACKEND={_current!r}; expected one of {_VALID}")


def interpret_mode() -> bool:
    """True when Triton runs in its CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def get_backend() -> str:
    return _current


def set_backend(name: str) -> None:
    """Set the process-wide backend: ``"auto"``, ``"reference"`` or ``"triton"``."""
    global _current
    if name not in _VALID:
        raise ValueError(f"backend must be one of {_VALID}, got {name!r}")
    _current = name


@contextlib.contextmanager
def backend(name: str) -> Iterator[None]:
    """Temporarily select a backend: ``with lowbit.backend("triton"): ...``."""
    previous = _current
    set_backend(name)
    try:
        yield
    finally:
        set_backend(previous)


def triton_available() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def use_triton(*tensors: torch.Tensor) -> bool:
    """Decide the path for an op whose inputs are ``tensors`` (None entries are ignored)."""
    devices = {t.device.type for t in tensors if t is not None}
    if _current == "reference":
        return False
    if _current == "auto":
        return devices == {"cuda"} and triton_available()
    # forced "triton"
    if devices <= {"cuda"}:
        return True
    if interpret_mode():
        return True
    raise ValueError(
        f"backend 'triton' was forced but the inputs are on {sorted(devices)}; CPU tensors can "
        "only run Triton kernels under TRITON_INTERPRET=1 (set before triton is imported)"
    )


@functools.lru_cache(maxsize=None)
def _cuda_sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def sm_count(device: torch.device, interpret: int) -> int:
    """Streaming multiprocessors of ``device`` (cached per device). For CPU tensors (the Triton
    interpreter) the caller's ``interpret`` count, chosen small so that its multi-program paths
    (split-K, persistent loops, split top-k lists) still run on small test shapes."""
    if device.type != "cuda":
        return interpret
    return _cuda_sm_count(device.index if device.index is not None else torch.cuda.current_device())


@functools.lru_cache(maxsize=None)
def _cuda_capability(index: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(index)


def capability_at_least(device: torch.device, cap: tuple[int, int]) -> bool:
    """Whether ``device`` is a CUDA GPU of compute capability >= ``cap`` (cached per device)."""
    if device.type != "cuda":
        return False
    return _cuda_capability(device.index if device.index is not None else torch.cuda.current_device()) >= cap


def describe() -> dict:
    """What will run where, for ``lowbit info``."""
    info = {
        "torch": torch.__version__,
        "cuda_available": torch.cuda.is_available(),
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
        "backend": _current,
        "triton_interpret": interpret_mode(),
    }
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
    if _current == "reference" or not info["triton"]:
        info["paths"] = "reference (PyTorch) for every tensor"
    elif info["cuda_available"]:
        info["paths"] = "Triton for CUDA tensors, reference (PyTorch) for CPU tensors"
    elif info["triton_interpret"]:
        info["paths"] = "reference for CPU tensors; Triton interpreter when backend='triton'"
    else:
        info["paths"] = "reference (PyTorch): no GPU here"
    return info
