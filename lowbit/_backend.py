"""Which implementation an op runs: the Triton kernel or the pure-PyTorch reference.

Rules (every op's ``__init__.py`` asks :func:`use_triton`):

* ``"auto"`` (default): CUDA tensors run Triton, everything else runs the reference. A CPU
  tensor never reaches a Triton launch, even on a CUDA host.
* ``"reference"``: always the reference (useful to compare on the GPU).
* ``"triton"``: always Triton. CPU tensors are only accepted when ``TRITON_INTERPRET=1`` was set
  before Triton was imported (the interpreter tier of the test-suite); otherwise ``ValueError``.

Selection (the effective backend of a call is the innermost rule that applies):

* ``with lowbit.backend(name): ...`` selects ``name`` for the **calling thread only**, until the
  block exits (then the thread's previous selection returns). Blocks nest. Other threads are not
  affected, whatever order their own blocks enter and exit in (like torch's ``no_grad``: the
  state is thread-local, over a process-wide default).
* ``lowbit.set_backend(name)`` sets the **process-wide default**: what every thread runs that is
  not inside a ``lowbit.backend(...)`` block (including threads started later). Inside a block,
  the block still wins in that thread; the new default shows once the thread leaves its blocks.
* The environment variable ``LOWBIT_BACKEND`` gives the initial default (``"auto"`` if unset).

``lowbit.get_backend()`` returns the calling thread's effective backend.

The Triton CPU interpreter (``TRITON_INTERPRET=1``) of Triton <= 3.6 breaks under numpy >= 2.4;
the first op that would run a kernel under it checks the installed versions and raises a
``RuntimeError`` that says so (see :func:`check_interpreter_numpy`).
"""
from __future__ import annotations

import contextlib
import functools
import os
import re
import threading
from typing import Iterator

import torch

_VALID = ("auto", "reference", "triton")
_default = os.environ.get("LOWBIT_BACKEND", "auto")
if _default not in _VALID:
    raise ValueError(f"LOWBIT_BACKEND={_default!r}; expected one of {_VALID}")


class _ThreadState(threading.local):
    """Per-thread stack of ``backend(...)`` selections; empty means "the process default"."""

    def __init__(self) -> None:
        self.stack: list[str] = []


_local = _ThreadState()


def _check_name(name) -> str:
    if not isinstance(name, str) or name not in _VALID:
        raise ValueError(f"backend must be one of {_VALID}, got {name!r}")
    return name


def interpret_mode() -> bool:
    """True when Triton runs in its CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


# Triton 3.6's interpreter converts loop bounds with ``int(np_array)``, which numpy 2.4 refuses
# for arrays of ndim > 0 ("only 0-dimensional arrays can be converted to Python scalars").
# Newer Triton releases are not blocked (not known to break); update when one is verified.
_INTERPRETER_NUMPY_LIMIT = {(3, 6): (2, 4)}


def _version_tuple(version: str, n: int) -> tuple[int, ...]:
    """``"2.4.0rc1"`` -> ``(2, 4)``: the leading integers of the first ``n`` dotted parts."""
    return tuple(int(m.group()) if (m := re.match(r"\d+", p)) else 0 for p in version.split(".")[:n])


def interpreter_numpy_problem(triton_version: str, numpy_version: str) -> str | None:
    """The message for a Triton/numpy pair whose CPU interpreter is known broken, else None."""
    tv = _version_tuple(triton_version, 2)
    nv = _version_tuple(numpy_version, 2)
    for triton_max, numpy_bad in _INTERPRETER_NUMPY_LIMIT.items():
        if tv <= triton_max and nv >= numpy_bad:
            return (
                f"the Triton CPU interpreter (TRITON_INTERPRET=1) of triton {triton_version} does not work with "
                f"numpy {numpy_version} (numpy >= {numpy_bad[0]}.{numpy_bad[1]} breaks it: 'only 0-dimensional "
                f"arrays can be converted to Python scalars'); install numpy<{numpy_bad[0]}.{numpy_bad[1]} "
                "(requirements.txt pins a working one), or use the reference backend on CPU"
            )
    return None


@functools.lru_cache(maxsize=None)
def check_interpreter_numpy() -> None:
    """``RuntimeError`` when the installed Triton's CPU interpreter is known broken by the
    installed numpy (checked once, before the first interpreted launch)."""
    import numpy
    import triton

    problem = interpreter_numpy_problem(triton.__version__, numpy.__version__)
    if problem is not None:
        raise RuntimeError(problem)


def get_backend() -> str:
    """The backend ops called from this thread run: the innermost ``backend(...)`` block of this
    thread, else the process-wide default (``set_backend`` / ``LOWBIT_BACKEND``)."""
    stack = _local.stack
    return stack[-1] if stack else _default


def set_backend(name: str) -> None:
    """Set the process-wide default backend: ``"auto"``, ``"reference"`` or ``"triton"``.

    Every thread that is not inside a ``lowbit.backend(...)`` block runs the default, from the
    next op call on (threads already running included). A ``lowbit.backend(...)`` block overrides
    it in its own thread only, and keeps doing so if the default changes meanwhile. ``ValueError``
    for any other name.
    """
    global _default
    _default = _check_name(name)


@contextlib.contextmanager
def backend(name: str) -> Iterator[None]:
    """Select a backend for the calling thread: ``with lowbit.backend("triton"): ...``.

    Thread-local: other threads keep their own selection (or the process default), and leaving
    the block restores exactly this thread's previous selection, whatever other threads did
    meanwhile. Blocks nest. Never changes the process default (see :func:`set_backend`).
    """
    stack = _local.stack
    stack.append(_check_name(name))
    depth = len(stack)
    try:
        yield
    finally:
        # Leave exactly this block's entry (a generator closed out of order cannot pop another's).
        del stack[depth - 1:]


def triton_available() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def use_triton(*tensors: torch.Tensor) -> bool:
    """Decide the path for an op whose inputs are ``tensors`` (None entries are ignored)."""
    devices = {t.device.type for t in tensors if t is not None}
    current = get_backend()
    if current == "reference":
        return False
    if current == "auto":
        return devices == {"cuda"} and triton_available()
    # forced "triton"
    if devices <= {"cuda"}:
        return True
    if interpret_mode():
        check_interpreter_numpy()
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
        "backend": get_backend(),
        "triton_interpret": interpret_mode(),
    }
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
    if info["backend"] == "reference" or not info["triton"]:
        info["paths"] = "reference (PyTorch) for every tensor"
    elif info["cuda_available"]:
        info["paths"] = "Triton for CUDA tensors, reference (PyTorch) for CPU tensors"
    elif info["triton_interpret"]:
        info["paths"] = "reference for CPU tensors; Triton interpreter when backend='triton'"
    else:
        info["paths"] = "reference (PyTorch): no GPU here"
    return info
