"""DraftHead(..., eager_graphs=True): eager CUDA calls replay recorded graphs, with the plain
calls' answers and statistics."""
from __future__ import annotations

import pytest
import torch

from lowbit.formats import FP8
from lowbit.nn.draft_head import DraftHead

N, K = 1000, 64  # N: a partial last block


def _weight(seed: int = 3) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(N, K, generator=g) * 0.02).to(torch.bfloat16)


def _xs(m: int, count: int, seed: int = 4) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed + m)
    return [torch.randn(m, K, generator=g).to(torch.bfloat16) for _ in range(count)]


def test_off_cuda_the_plain_calls():
    """On CPU the flag changes nothing (no graphs): same answers as a plain head."""
    w = _weight()
    plain, graphed = DraftHead(w), DraftHead(w, eager_graphs=True)
    for x in _xs(3, 2):
        assert torch.equal(plain.argmax(x), graphed.argmax(x))
        for a, b in zip(plain.topk(x, 5), graphed.topk(x, 5)):
            assert torch.equal(a, b)
    assert not graphed._graphs._graphs
    assert graphed.extra_repr() == plain.extra_repr() + ", eager_graphs=True"


@pytest.mark.parametrize("bad", [1, "yes", None])
def test_flag_must_be_a_bool(bad):
    with pytest.raises(ValueError, match="eager_graphs"):
        DraftHead(_weight(), eager_graphs=bad)


@pytest.mark.cuda
@pytest.mark.parametrize("mode", ["certified", "fast"])
def test_replays_match_the_plain_calls(mode):
    """Per row count: the first call records, the next ones replay -- each answer equals the plain
    head's on that input, the answers are fresh tensors (not the graph's outputs), and both heads'
    statistics agree after the same calls."""
    w = _weight().cuda()
    plain, graphed = DraftHead(w, mode=mode), DraftHead(w, mode=mode, eager_graphs=True)
    kept = []
    for m in (1, 4, 16):
        for x in _xs(m, 4):
            x = x.cuda()
            a = graphed.argmax(x)
            assert torch.equal(a, plain.argmax(x)), (mode, m)
            v, i = graphed.topk(x, 5)
            pv, pi = plain.topk(x, 5)
            assert torch.equal(i, pi) and torch.equal(v, pv), (mode, m)
            kept.append((x, a.clone(), a))
    for x, before, a in kept:  # later replays did not overwrite an earlier answer
        assert torch.equal(a, before)
    assert len(graphed._graphs._graphs) == 6  # (argmax, topk 5) x 3 row counts
    got, want = graphed.stats, plain.stats
    nan = [key for key, v in want.items() if v != v]  # no set sizes (fast mode)
    assert got.keys() == want.keys() and all(got[key] != got[key] for key in nan), (got, want)
    assert {key: got[key] for key in got if key not in nan} == {key: want[key] for key in want if key not in nan}


@pytest.mark.cuda
def test_weight_update_drops_the_graphs():
    """An in-place weight update re-packs the head; the recorded graphs (over the old packing) are
    dropped and the answers follow the new weight."""
    w = _weight().cuda()
    graphed = DraftHead(w, eager_graphs=True)
    x = _xs(2, 1)[0].cuda()
    graphed.argmax(x), graphed.argmax(x)
    w.copy_(_weight(seed=9).cuda())
    assert torch.equal(graphed.argmax(x), DraftHead(w).argmax(x))
    assert torch.equal(graphed.argmax(x), DraftHead(w).argmax(x))  # a replay of the new graph


@pytest.mark.cuda
def test_inside_a_capture_and_not_capturable():
    """Inside a user's capture the head records nothing and is captured as a plain head; a head
    that synchronizes (certified over FP8 rows) never records."""
    w = _weight().cuda()
    graphed, plain = DraftHead(w, eager_graphs=True), DraftHead(w)
    x = _xs(4, 1)[0].cuda()
    graphed.argmax(x)  # compiled (and recorded) eagerly first
    static_x = x.clone()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = graphed.argmax(static_x)
    for x2 in _xs(4, 2, seed=11):
        static_x.copy_(x2.cuda())
        graph.replay()
        assert torch.equal(out, plain.argmax(static_x))
    q = FP8.quantize(w.float(), "row")
    fp8 = DraftHead(q, eager_graphs=True)
    assert not fp8.capturable()
    assert torch.equal(fp8.argmax(x), fp8.argmax(x))
    assert not fp8._graphs._graphs


class _FakeGraph:
    """Stands in for a captured graph on CPU: a replay runs the function again into the static
    outputs (what a CUDA graph's kernels do)."""

    def __init__(self, fn, static_x, out):
        self.fn, self.static_x, self.out = fn, static_x, out

    def replay(self):
        self.fn.replaying = True  # the kernels run again, not the host code around them
        try:
            new = self.fn(self.static_x)
        finally:
            self.fn.replaying = False
        for t, n in zip(self.out, new):
            if t is not None:
                t.copy_(n)


def _fake_capture(fn, static_x):
    fn(static_x)  # the warm-up
    out = fn(static_x)
    return _FakeGraph(fn, static_x, out), out


def test_graph_bookkeeping(monkeypatch):
    """The logic around the graphs, with a stand-in for the capture (CPU): the first call of a key
    answers directly and records; replays copy x in, return fresh copies of the outputs and count
    one call on the host counters when asked, while the recording's own runs are taken back out; a
    new owner drops every graph; the least recently used graph goes first."""
    from lowbit.nn import eager_graphs
    from lowbit.ops.coarse_head import HeadStats

    monkeypatch.setattr(eager_graphs, "_capture", _fake_capture)
    stats = HeadStats()
    runs = []

    def fn(x):  # counts on the host as the fast pipeline does
        runs.append(x)
        if not fn.replaying:
            stats.calls += 1
            stats.rows += x.shape[0]
        if stats.device is not None:  # a device counter: kernels bump it, replays included
            stats.device[0] += 1
        return None, x * 2

    fn.replaying = False

    graphs, owner = eager_graphs.EagerGraphs(max_graphs=2), object()
    xs = [torch.randn(3, 4) for _ in range(3)]
    _, first = graphs.call("a", owner, stats, fn, xs[0], count_host=True)
    assert torch.equal(first, xs[0] * 2) and len(runs) == 3  # the call, the warm-up, the capture
    assert (stats.calls, stats.rows) == (1, 3)
    none, second = graphs.call("a", owner, stats, fn, xs[1], count_host=True)
    assert none is None and torch.equal(second, xs[1] * 2) and len(runs) == 4  # one replay
    _, third = graphs.call("a", owner, stats, fn, xs[2], count_host=True)
    assert torch.equal(second, xs[1] * 2), "a later replay overwrote an earlier answer"
    assert torch.equal(third, xs[2] * 2) and (stats.calls, stats.rows) == (3, 9)
    stats.device = torch.zeros(7, dtype=torch.int64)
    graphs.call("b", owner, stats, fn, xs[0], count_host=False)
    assert int(stats.device[0]) == 1  # the call; the recording's runs taken back out
    graphs.call("b", owner, stats, fn, xs[1], count_host=False)
    assert (stats.calls, stats.rows) == (4, 12)  # the recording call only: replays count on the device
    assert int(stats.device[0]) == 2
    graphs.call("a", owner, stats, fn, xs[0], count_host=True)  # "a" most recent
    graphs.call("c", owner, stats, fn, xs[0], count_host=True)  # evicts "b"
    assert list(graphs._graphs) == ["a", "c"]
    graphs.call("a", object(), stats, fn, xs[0], count_host=True)  # another owner: all dropped, "a" anew
    assert list(graphs._graphs) == ["a"]

    def refused(fn, static_x):  # what a capture CUDA rejects raises
        fn(static_x)
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(eager_graphs, "_capture", refused)
    calls, owner2 = stats.calls, graphs._owner
    _, out = graphs.call("d", owner2, stats, fn, xs[1], count_host=True)
    assert torch.equal(out, xs[1] * 2) and graphs._graphs["d"] is None  # answered; stays plain
    assert stats.calls == calls + 1  # the failed recording's run taken back out
    _, out = graphs.call("d", owner2, stats, fn, xs[2], count_host=True)
    assert torch.equal(out, xs[2] * 2) and stats.calls == calls + 2


def test_safety_asked_once_per_key(monkeypatch):
    """``safe`` is asked when a key is first seen, not on every call: an unsafe key is answered
    plainly from then on (nothing recorded), a safe one records; a new owner asks again."""
    from lowbit.nn import eager_graphs
    from lowbit.ops.coarse_head import HeadStats

    monkeypatch.setattr(eager_graphs, "_capture", _fake_capture)
    asked, runs = [], []

    def fn(x):
        runs.append(x)
        return None, x + 1

    def safe_for(verdict):
        return lambda: asked.append(verdict) or verdict

    graphs, owner, x = eager_graphs.EagerGraphs(), object(), torch.randn(2, 3)
    for _ in range(3):
        _, out = graphs.call("unsafe", owner, HeadStats(), fn, x, count_host=False, safe=safe_for(False))
        assert torch.equal(out, x + 1)
    assert asked == [False] and len(runs) == 3 and not graphs._graphs  # plain calls, one question
    for _ in range(3):
        graphs.call("safe", owner, HeadStats(), fn, x, count_host=False, safe=safe_for(True))
    assert asked == [False, True] and list(graphs._graphs) == ["safe"]
    graphs.call("unsafe", object(), HeadStats(), fn, x, count_host=False, safe=safe_for(False))
    assert asked == [False, True, False]
