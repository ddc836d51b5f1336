"""The split-K GEMVs' arrival counters (``lowbit/ops/_arrival_counters.py``): one buffer per
(device, stream), grown under a lock with the replaced buffers kept, made inside a CUDA-graph
capture too (and zeroed for the eager launches that follow it).

CPU tier: the keying, the capture bookkeeping and the lock, with the stream and the capture query
patched. cuda tier: split launches of the FP8 and FP4 wgmma GEMVs on two streams at once, and graphs
captured on a stream that has no counters yet."""
from __future__ import annotations

import threading
import time

import pytest
import torch

from lowbit.ops import _arrival_counters as ac
from tests._helpers import rel_err

CPU = torch.device("cpu")


@pytest.fixture
def fresh(monkeypatch):
    """Empty counter tables for the test (the module's own ones come back afterwards), and a
    settable current stream: ``fresh.stream`` (per thread) keys the buffers, ``fresh.capturing``
    plays the capture query."""

    class State(threading.local):
        stream = 0
        capturing = False

    state = State()
    monkeypatch.setattr(ac, "_COUNTERS", {})
    monkeypatch.setattr(ac, "_RETIRED", [])
    monkeypatch.setattr(ac, "stream_key", lambda device: (device.type, device.index, state.stream))
    monkeypatch.setattr(ac, "_capturing", lambda device: state.capturing)
    return state


def test_stream_key_names_device_and_stream(monkeypatch):
    """CUDA keys carry the device index (the current device for a bare ``cuda``) and the current
    stream's id; CPU keys stream 0."""

    class FakeStream:
        def __init__(self, sid):
            self.stream_id = sid

    streams = {0: FakeStream(11), 1: FakeStream(22)}
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda index: streams[index])
    assert ac.stream_key(torch.device("cuda", 0)) == ("cuda", 0, 11)
    assert ac.stream_key(torch.device("cuda")) == ("cuda", 1, 22)
    streams[1] = FakeStream(33)  # another stream made current on device 1
    assert ac.stream_key(torch.device("cuda", 1)) == ("cuda", 1, 33)
    assert ac.stream_key(CPU) == ("cpu", None, 0)


def test_one_buffer_per_stream(fresh):
    """Calls on one stream share a buffer; another stream gets its own; each is zeroed int32 and
    holds at least the tiles asked (and the minimum size)."""
    a = ac.arrival_counters(CPU, 5, "t")
    assert a.dtype == torch.int32 and a.numel() >= max(5, ac._MAX_TILES) and not a.any()
    assert ac.arrival_counters(CPU, 7, "t") is a
    fresh.stream = 1
    b = ac.arrival_counters(CPU, 5, "t")
    assert b is not a and b.data_ptr() != a.data_ptr()
    fresh.stream = 0
    assert ac.arrival_counters(CPU, 3, "t") is a
    assert len(ac._COUNTERS) == 2 and not ac._RETIRED


def test_growth_keeps_the_replaced_buffer(fresh):
    """A launch needing more tiles gets a larger buffer; the old one is kept (graphs captured with
    it still write into it) and the smaller launches then share the larger one."""
    small = ac.arrival_counters(CPU, 4, "t")
    big = ac.arrival_counters(CPU, ac._MAX_TILES + 1, "t")
    assert big.numel() == ac._MAX_TILES + 1 and not big.any()
    assert len(ac._RETIRED) == 1 and ac._RETIRED[0] is small
    assert ac.arrival_counters(CPU, 4, "t") is big


def test_buffer_made_in_a_capture_is_zeroed_by_the_next_eager_call(fresh):
    """Inside a capture the zeros are only recorded: the buffer stays the stream's, every later
    captured launch records the zeroing of its own tiles' counters until an eager call zeroes the
    whole buffer for good (stream-ordered); from then on calls do not touch it (the kernels leave
    it zero)."""
    fresh.capturing = True
    buf = ac.arrival_counters(CPU, 4, "t")
    buf.fill_(7)  # what the memory holds: the capture did not run the zeroing
    assert ac.arrival_counters(CPU, 6, "t") is buf  # a later captured launch zeroes its own counters
    assert not buf[:6].any() and bool((buf[6:] == 7).all())
    buf.fill_(7)
    fresh.capturing = False
    assert ac.arrival_counters(CPU, 4, "t") is buf and not buf.any()  # the first eager call
    buf.fill_(7)  # (a kernel's business now: the counters are no longer zeroed per call)
    assert ac.arrival_counters(CPU, 4, "t") is buf and bool((buf == 7).all())
    fresh.capturing = True
    assert ac.arrival_counters(CPU, 4, "t") is buf and bool((buf == 7).all())
    assert not ac._RETIRED


def test_growth_inside_a_capture(fresh):
    """A capture that needs a larger buffer makes it (the old one retired) and it too is zeroed by
    the next eager call."""
    old = ac.arrival_counters(CPU, 4, "t")
    fresh.capturing = True
    new = ac.arrival_counters(CPU, ac._MAX_TILES * 2, "t")
    assert ac._RETIRED == [old] and new is not old
    new.fill_(3)
    fresh.capturing = False
    assert ac.arrival_counters(CPU, 1, "t") is new and not new.any()


def test_threads_growing_at_once(fresh, monkeypatch):
    """Threads on three streams growing their buffers at once: each call gets a zeroed buffer of its
    stream that serves its tiles, one buffer per stream stays, and every replaced buffer is retired
    (none dropped while a kernel may use it). The allocation is slowed down so that unlocked
    creation would lose buffers."""
    made = []
    inside = []

    def slow_zeros(device, n):
        inside.append(ac._LOCK.locked())
        t = torch.zeros(n, dtype=torch.int32)
        made.append(t)
        time.sleep(0.0005)
        return t

    monkeypatch.setattr(ac, "_zeros", slow_zeros)
    start = threading.Barrier(9)
    got = []

    def run(i):
        fresh.stream = i % 3
        start.wait()
        for step in range(1, 40):
            tiles = ac._MAX_TILES + 97 * step + i
            got.append((i % 3, tiles, ac.arrival_counters(CPU, tiles, "t")))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(inside) and len(got) == 9 * 39
    final = {key[2]: e.buf for key, e in ac._COUNTERS.items()}
    assert sorted(final) == [0, 1, 2]
    for stream, tiles, buf in got:
        assert buf.numel() >= tiles
        assert buf is final[stream] or any(buf is r for r in ac._RETIRED)
        assert all(buf is not final[s] for s in final if s != stream)  # never another stream's
    live = [t for t in made if not any(t is f for f in final.values())]
    assert len(live) == len(ac._RETIRED) and all(any(t is r for r in ac._RETIRED) for t in live)


def test_dispatch_problems_allow_split_launches():
    """The GEMMs' dispatch no longer routes around the split GEMV for want of counters (they are
    made on demand, inside a capture too)."""
    from lowbit.ops.fp4_gemm import dispatch as d4
    from lowbit.ops.fp8_gemm import dispatch as d8

    assert not hasattr(ac, "counters_ready")
    assert not hasattr(d8, "counters_ready") and not hasattr(d4, "counters_ready")


# -------------------------------------------------------------------------------------- cuda tier


def _fp8():
    from tests.ops import test_fp8_wgmma_gemv as t8

    g = t8._kernel_or_skip()

    def make(seed):
        a, b = t8._operands(8, 640, 4096, seed=seed)
        args = [t.cuda() for t in (a.data, a.scale, b.data, b.scale)]
        return args, t8._want(a, b)

    return make, lambda args, out: g.fp8_wgmma_gemv(*args, config=(2, 4), out=out), t8.TOL


def _fp4():
    from tests.ops import test_fp4_wgmma_gemv as t4

    g = t4._kernel_or_skip()

    def make(seed):
        a, b = t4._operands(8, 640, 4096, seed=seed)
        args = [t.cuda() for t in (a.data, a.scale, b.packed, b.scale)]
        return args, a.dequantize(torch.float64) @ b.dequantize(torch.float64).T

    return make, lambda args, out: g.fp4_wgmma_gemv(*args, config=(2, 4), out=out), t4.TOL


@pytest.mark.cuda
@pytest.mark.parametrize("which", ["fp8", "fp4"])
def test_cuda_split_gemvs_on_two_streams_at_once(which):
    """Split launches (4 splits over 10 row tiles) on two streams, queued back to back without a
    synchronization, so the streams' launches overlap: every output equals the fp64 product of its
    own inputs, and the streams used two counter buffers, left at zero."""
    make, launch, tol = (_fp8 if which == "fp8" else _fp4)()
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    inputs = [make(seed) for seed in range(4)]
    outs = [[torch.full((8, 640), float("nan"), dtype=torch.bfloat16, device="cuda") for _ in range(12)]
            for _ in streams]
    launch(inputs[0][0], outs[0][0])  # compile outside the timed overlap
    torch.cuda.synchronize()
    for s in streams:
        s.wait_stream(torch.cuda.current_stream())
    for i in range(12):
        for j, s in enumerate(streams):
            with torch.cuda.stream(s):
                launch(inputs[(i + 2 * j) % 4][0], outs[j][i])
    torch.cuda.synchronize()
    for j in range(2):
        for i in range(12):
            assert rel_err(outs[j][i], inputs[(i + 2 * j) % 4][1]) < tol, (j, i)
    keys = {ac.stream_key(torch.device("cuda"))}
    for s in streams:
        with torch.cuda.stream(s):
            keys.add(ac.stream_key(torch.device("cuda")))
    bufs = [ac._COUNTERS[k].buf for k in keys if k in ac._COUNTERS]
    assert len({b.data_ptr() for b in bufs}) == len(bufs) >= 2
    assert not any(b.any() for b in bufs)


@pytest.mark.cuda
@pytest.mark.parametrize("which", ["fp8", "fp4"])
def test_cuda_split_gemv_captured_on_a_stream_without_counters(which):
    """A graph captured on a stream that has no counters yet makes them inside the capture, and a
    second graph captured there records its own zeroing: replays on new inputs are right, the later
    graph's first too, and so are eager launches on that stream afterwards (the buffer, only zeroed
    inside the graphs, is zeroed by the first of them)."""
    make, launch, tol = (_fp8 if which == "fp8" else _fp4)()
    (args, _), (args2, want2), (_, want0) = make(0), make(1), make(0)
    out = torch.empty(8, 640, dtype=torch.bfloat16, device="cuda")
    launch(args, out)  # compile (counters on the current stream only)
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        key = ac.stream_key(torch.device("cuda"))
    old = ac._COUNTERS.pop(key, None)  # a pooled stream an earlier test used: start it afresh
    if old is not None:
        ac._RETIRED.append(old.buf)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        launch(args, out)
    assert ac._COUNTERS[key].unset
    graph2, out2 = torch.cuda.CUDAGraph(), torch.empty_like(out)
    with torch.cuda.graph(graph2, stream=side):  # the same buffer, its own zeroing recorded
        launch(args, out2)
    for dst, src in zip(args, args2):
        dst.copy_(src)
    out.fill_(float("nan"))
    out2.fill_(float("nan"))
    graph2.replay()  # the later graph first
    graph.replay()
    torch.cuda.synchronize()
    assert rel_err(out2, want2) < tol and rel_err(out, want2) < tol
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        eager = torch.full_like(out, float("nan"))
        launch(args, eager)
    torch.cuda.synchronize()
    assert rel_err(eager, want2) < tol and not ac._COUNTERS[key].unset
    for dst, src in zip(args, make(0)[0]):
        dst.copy_(src)
    graph.replay()
    torch.cuda.synchronize()
    assert rel_err(out, want0) < tol


@pytest.mark.cuda
def test_cuda_fp8_gemm_captured_fresh_takes_the_split_gemv(monkeypatch):
    """The public op inside a capture on a fresh stream routes like an eager call (the split wgmma
    GEMV), where it used to fall back for want of counters; the replay is right."""
    from tests.ops import test_fp8_wgmma_gemv as t8

    g = t8._kernel_or_skip()
    from lowbit.ops.fp8_gemm import fp8_gemm

    a, b = t8._operands(16, 2112, 7168)  # M 9..16: the wgmma GEMV, 7 splits
    args = [t.cuda() for t in (a.data, a.scale, b.data, b.scale)]
    eager = fp8_gemm(*args)
    calls = []
    real = g.fp8_wgmma_gemv
    monkeypatch.setattr(g, "fp8_wgmma_gemv", lambda *x, **kw: calls.append(1) or real(*x, **kw))
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=torch.cuda.Stream()):
        out = fp8_gemm(*args)
    graph.replay()
    torch.cuda.synchronize()
    assert calls == [1] and torch.equal(out, eager)
