"""Programmatic dependent launch (PDL) for the Gluon decode kernels (sm_90).

A kernel launched with ``launch_pdl=True`` may start while the kernel before it in the stream is
still draining: its CTAs are placed as soon as the previous kernel's CTAs have all exited (or
triggered ``griddepcontrol.launch_dependents``), and ``griddepcontrol.wait`` blocks until that
kernel has completed and its memory is visible. Everything before the wait therefore overlaps the
previous kernel's tail and this kernel's own launch latency; at decode sizes, where a GEMV is a
few microseconds, that is a large share of its time (docs/gemm.md).

The rule the kernels keep: **no global load or store before** :func:`gdc_wait`, not even of the
weights (the previous kernel may be the one that wrote them: a freshly quantized layer). Both
instructions are no-ops in a launch without the PDL attribute. An L2 prefetch of the CTA's weights
before the wait made the FP4 GEMV much slower (the prefetches queue in the SM's TMA unit ahead of
the real loads; docs/design-notes.md).
"""
from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

__all__ = ["gdc_launch_dependents", "gdc_wait"]


@gluon.jit
def gdc_wait():
    """Wait until the previous kernel of the stream has completed and its writes are visible."""
    gl.inline_asm_elementwise("griddepcontrol.wait; // $0", "=r", [], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def gdc_launch_dependents():
    """Let the next PDL-launched kernel of the stream place its CTAs once every CTA of this one
    has called this (or exited)."""
    gl.inline_asm_elementwise("griddepcontrol.launch_dependents; // $0", "=r", [], dtype=gl.int32, is_pure=False,
                              pack=1)
