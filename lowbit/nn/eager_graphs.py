"""CUDA-graph replay for eager calls of the draft head (``DraftHead(..., eager_graphs=True)``).

An eager draft-head call is host-bound: a few launches with many arguments, and a dozen
allocations, cost several times the kernels' own time (``ROADMAP.md`` §7). A drafter that captures
the head pays none of it; one that calls the head eagerly can let the head capture itself: the
first eager call with a given signature (rows, k, dtype, device) runs as usual -- compiling what it
needs -- and then records the same call into a CUDA graph over a static copy of ``x``; later calls
with that signature copy ``x`` in, replay, and return copies of the graph's outputs.

Only calls that are CUDA-graph safe (``DraftHead.capturable(k)``) are recorded, never inside
another capture or a ``torch.compile`` trace. A re-packed head (the weight changed) drops its
graphs. The statistics stay those of the plain calls: the recording's own executions are taken
back out, and replays count as calls (on the device for the certified tails; on the host for fast
mode, whose counts are host-side).
"""
from __future__ import annotations

import dataclasses
from collections import OrderedDict

import torch

#: graphs a head keeps (least recently used dropped first): each holds its outputs and scratch
MAX_GRAPHS = 64


@dataclasses.dataclass
class _Graph:
    x: torch.Tensor  # the static input the graph reads
    graph: torch.cuda.CUDAGraph  # or anything with replay() (tests)
    out: tuple  # the static outputs (tensors or None)


class EagerGraphs:
    """One head's graphs, keyed by call signature (None: a signature whose capture failed, answered
    plainly); :meth:`call` answers ``fn(x)``."""

    def __init__(self, max_graphs: int = MAX_GRAPHS):
        self.max_graphs = max_graphs
        self._graphs: OrderedDict[tuple, _Graph] = OrderedDict()
        self._unsafe: set = set()  # keys ``safe`` refused: answered plainly, never recorded
        self._owner = None  # the head state the graphs read (a re-pack makes a new one)

    def clear(self) -> None:
        self._graphs.clear()
        self._unsafe.clear()

    def call(self, key: tuple, owner, stats, fn, x: torch.Tensor, count_host: bool, safe=None) -> tuple:
        """``fn(x)``, from a replayed graph where one is recorded for ``key``. ``owner``: the state
        ``fn`` reads (graphs of another owner are dropped); ``stats``: the head's
        :class:`~lowbit.ops.coarse_head.HeadStats`; ``count_host``: a replay adds one call of
        ``x``'s rows to the host counters (what ``fn`` itself does on the host); ``safe``: asked
        once per key, when it is first seen (None: every key is safe) -- an unsafe key is answered
        plainly from then on, so later calls do not ask again."""
        if owner is not self._owner:
            self.clear()
            self._owner = owner
        if key in self._unsafe:
            return fn(x)
        if key not in self._graphs:
            if safe is not None and not safe():
                self._unsafe.add(key)
                return fn(x)
            out = fn(x)  # this call's answer; compiles anything not compiled yet
            try:
                self._record(key, stats, fn, x)
            except RuntimeError:  # a capture CUDA refused: this signature stays plain
                self._graphs[key] = None
            return out
        self._graphs.move_to_end(key)
        g = self._graphs[key]
        if g is None:
            return fn(x)
        g.x.copy_(x)
        g.graph.replay()
        if count_host:
            stats.calls += 1
            stats.rows += x.shape[0]
        return tuple(None if t is None else t.clone() for t in g.out)

    def _record(self, key: tuple, stats, fn, x: torch.Tensor) -> None:
        saved = dataclasses.replace(stats)
        device_counts = None if stats.device is None else stats.device.clone()
        static_x = torch.empty_like(x).copy_(x)
        try:
            graph, out = _capture(fn, static_x)
        finally:
            self._restore(stats, saved, device_counts)
        self._graphs[key] = _Graph(static_x, graph, tuple(out))
        while len(self._graphs) > self.max_graphs:
            self._graphs.popitem(last=False)

    @staticmethod
    def _restore(stats, saved, device_counts) -> None:
        """The warm-up and the capture are not calls: the counters as they were before them."""
        for f in dataclasses.fields(stats):
            if f.name != "device":
                setattr(stats, f.name, getattr(saved, f.name))
        if device_counts is not None and stats.device is not None:
            stats.device.copy_(device_counts)
        elif stats.device is not None:  # made during the warm-up: it counted only the warm-up
            stats.device.zero_()


def _capture(fn, static_x: torch.Tensor):
    """(graph, outputs) of ``fn(static_x)`` captured in a CUDA graph, after one warm-up call on a
    side stream (the allocator's, as ``torch.cuda.graph`` asks)."""
    side = torch.cuda.Stream(device=static_x.device)
    side.wait_stream(torch.cuda.current_stream(static_x.device))
    with torch.cuda.stream(side):
        fn(static_x)
    torch.cuda.current_stream(static_x.device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn(static_x)
    return graph, out


def recordable(x: torch.Tensor) -> bool:
    """An eager CUDA call outside any capture or trace."""
    return (x.is_cuda and not torch.compiler.is_compiling()
            and not torch.cuda.is_current_stream_capturing())


__all__ = ["MAX_GRAPHS", "EagerGraphs", "recordable"]
