"""Module-level switches set for the length of a measurement (same-run A/B of kernel variants)."""
from __future__ import annotations

import contextlib

__all__ = ["module_flags"]


@contextlib.contextmanager
def module_flags(module, flags: dict):
    """``module.<name> = value`` for each item of ``flags`` inside the ``with`` block; the old
    values come back afterwards, also when the block raises. The dispatchers read such switches
    at call time (e.g. ``lowbit.ops.gathered.triton_mma.PDL``)."""
    saved = {name: getattr(module, name) for name in flags}
    try:
        for name, value in flags.items():
            setattr(module, name, value)
        yield
    finally:
        for name, value in saved.items():
            setattr(module, name, value)
