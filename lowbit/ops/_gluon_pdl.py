"""Programmatic dependent launch (PDL) for the Gluon decode kernels (sm_90).

A kernel launched with ``launch_pdl=True`` may start while the kernel before it in the stream is
still draining: its CTAs are placed as soon as the previous kernel's CTAs have all exited (or
triggered ``griddepcontrol.launch_dependents``), and ``griddepcontrol.wait`` blocks until that
kernel has completed and its memory is visible. Everything before the wait therefore overlaps the
previous kernel's tail and this kernel's own launch latency; at decode sizes, where a GEMV is a
few microseconds, that is a large share of its time (measured: docs/gemm.md, "Seventeenth
session").

The rule the kernels keep: **no global load or store before** :func:`gdc_wait` -- except L2
prefetches of the weights (:func:`prefetch_l2`). A prefetch only moves lines from DRAM into L2,
the point of coherence of every SM, so it cannot return stale data even if the previous kernel is
still writing those weights (a freshly quantized layer); the real loads come after the wait and
hit L2. Both instructions are no-ops in a launch without the PDL attribute.
"""
from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

__all__ = ["gdc_launch_dependents", "gdc_wait", "prefetch_l2"]


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


@gluon.jit
def prefetch_l2(ptrs, nbytes):
    """Bulk L2 prefetch of ``nbytes`` (a multiple of 16; 0 skips) from each 16-byte aligned global
    address ``ptrs`` (``cp.async.bulk.prefetch.L2``: a hint, no data returned, nothing to wait
    for). A thread holding a replicated element issues it again; harmless."""
    gl.inline_asm_elementwise("{ .reg .pred p; setp.ne.u32 p, $2, 0; @p cp.async.bulk.prefetch.L2.global [$1], $2; "
                              "mov.u32 $0, 0; }", "=r,l,r", [ptrs, nbytes], dtype=gl.int32, is_pure=False, pack=1)
