"""Backend selection and the coarse-packing cache under real threads (issue #49, item 3), and the
Triton-interpreter numpy check (item 8).

``lowbit.backend(...)`` is thread-local over the process default that ``lowbit.set_backend``
sets; the interleavings below are forced with barriers / events, not left to the scheduler.
"""
from __future__ import annotations

import sys
import threading

import pytest
import torch

import lowbit
import lowbit._backend as _backend
from lowbit._backend import use_triton

TIMEOUT = 30  # seconds any wait may take before the test fails instead of hanging


def _run_threads(*targets):
    """Run each target in its own thread; re-raise the first failure in the caller."""
    errors: list[BaseException] = []

    def wrap(fn):
        def run():
            try:
                fn()
            except BaseException as e:  # noqa: BLE001 - reported to the main thread
                errors.append(e)
        return run

    threads = [threading.Thread(target=wrap(t)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
        assert not t.is_alive(), "a thread hung"
    if errors:
        raise errors[0]


def _wait(ev: threading.Event):
    assert ev.wait(TIMEOUT), "an event never came"


def test_issue_interleaving_a_exits_while_b_is_inside():
    """A enters "triton", B enters "reference", A exits: B must still run "reference", and when
    both are done the process default is what it was ("auto")."""
    lowbit.set_backend("auto")
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    seen = {}
    x = torch.zeros(4)  # a CPU tensor: "reference" -> reference path, "triton" -> interpreter

    def thread_a():
        with lowbit.backend("triton"):
            a_in.set()
            _wait(b_in)
            seen["a_inside"] = lowbit.get_backend()
        a_out.set()
        seen["a_after"] = lowbit.get_backend()

    def thread_b():
        _wait(a_in)
        with lowbit.backend("reference"):
            b_in.set()
            _wait(a_out)
            seen["b_after_a_exit"] = lowbit.get_backend()
            seen["b_uses_triton"] = use_triton(x)
        seen["b_after"] = lowbit.get_backend()

    _run_threads(thread_a, thread_b)
    assert seen == {"a_inside": "triton", "a_after": "auto", "b_after_a_exit": "reference",
                    "b_uses_triton": False, "b_after": "auto"}
    assert lowbit.get_backend() == "auto"


def test_exit_order_reversed_leaves_default_intact():
    """B enters after A and exits before it, then A exits: the process never ends stuck on a
    block's backend."""
    lowbit.set_backend("auto")
    a_in, b_out = threading.Event(), threading.Event()
    b_in = threading.Event()

    def thread_a():
        with lowbit.backend("triton"):
            a_in.set()
            _wait(b_out)
            assert lowbit.get_backend() == "triton"

    def thread_b():
        _wait(a_in)
        with lowbit.backend("reference"):
            b_in.set()
            assert lowbit.get_backend() == "reference"
        b_out.set()

    _run_threads(thread_a, thread_b)
    assert lowbit.get_backend() == "auto"


def test_block_is_invisible_to_other_threads():
    """While one thread is inside a block, another thread (and the main thread) see the default."""
    lowbit.set_backend("reference")
    inside, checked = threading.Event(), threading.Event()
    seen = {}

    def holder():
        with lowbit.backend("triton"):
            inside.set()
            _wait(checked)

    def observer():
        _wait(inside)
        seen["observer"] = lowbit.get_backend()
        checked.set()

    _run_threads(holder, observer)
    assert seen["observer"] == "reference"
    assert lowbit.get_backend() == "reference"


def test_set_backend_from_another_thread_changes_default_not_blocks():
    """set_backend is the process default: a thread outside any block sees it at once; a thread
    inside a block keeps its block and sees the new default after leaving it."""
    lowbit.set_backend("auto")
    inside, changed = threading.Event(), threading.Event()
    seen = {}

    def in_block():
        with lowbit.backend("triton"):
            inside.set()
            _wait(changed)
            seen["inside_after_change"] = lowbit.get_backend()
        seen["after_block"] = lowbit.get_backend()

    def outside():
        _wait(inside)
        lowbit.set_backend("reference")
        seen["setter"] = lowbit.get_backend()
        changed.set()

    _run_threads(in_block, outside)
    assert seen == {"inside_after_change": "triton", "after_block": "reference", "setter": "reference"}
    assert lowbit.get_backend() == "reference"


def test_nesting_and_exceptions_restore_this_thread_only():
    lowbit.set_backend("auto")
    with lowbit.backend("reference"):
        with pytest.raises(RuntimeError):
            with lowbit.backend("triton"):
                assert lowbit.get_backend() == "triton"
                raise RuntimeError("boom")
        assert lowbit.get_backend() == "reference"
        with lowbit.backend("auto"):
            assert lowbit.get_backend() == "auto"
        assert lowbit.get_backend() == "reference"
    assert lowbit.get_backend() == "auto"


@pytest.mark.parametrize("bad", ["gpu", "", None, 1, "Triton"])
def test_bad_names_are_value_errors(bad):
    with pytest.raises(ValueError, match="backend must be one of"):
        lowbit.set_backend(bad)
    with pytest.raises(ValueError, match="backend must be one of"):
        with lowbit.backend(bad):
            pass
    assert lowbit.get_backend() in ("auto", "reference", "triton")


def test_many_threads_each_keep_their_own_backend():
    """16 threads alternate blocks in lockstep (a barrier between steps): each sees only its own
    selection at every step."""
    lowbit.set_backend("auto")
    n, steps = 16, 25
    barrier = threading.Barrier(n, timeout=TIMEOUT)
    names = ("reference", "triton")

    def worker(i):
        def run():
            for step in range(steps):
                mine = names[(i + step) % 2]
                with lowbit.backend(mine):
                    barrier.wait()  # every thread is inside its block now
                    assert lowbit.get_backend() == mine
                    barrier.wait()
                assert lowbit.get_backend() == "auto"
        return run

    _run_threads(*(worker(i) for i in range(n)))
    assert lowbit.get_backend() == "auto"


# ----------------------------------------------------------------------------------- packing cache
def test_pack_cache_threads_distinct_and_shared_weights():
    """8 threads x 400 packs, half of a shared set of weights, half of weights private to each call
    (so entries are inserted and freed while other threads read the cache): no RuntimeError, and
    every pack of a shared weight is the same packing object."""
    from lowbit.ops.coarse_head.packing import pack

    n_threads, per_thread = 8, 400
    shared = [torch.randn(8, 32) for _ in range(4)]
    barrier = threading.Barrier(n_threads, timeout=TIMEOUT)
    results: list[list] = [[] for _ in range(n_threads)]

    def worker(i):
        def run():
            barrier.wait()
            for j in range(per_thread):
                if j % 2:
                    w = shared[(i + j) % len(shared)]
                    results[i].append((id(w), pack(w, 4, 16)))
                else:
                    w = torch.randn(8, 32)
                    p = pack(w, 4, 16)
                    assert p.n == 8 and p.k == 32
        return run

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: races show up in 400 packs
    try:
        _run_threads(*(worker(i) for i in range(n_threads)))
    finally:
        sys.setswitchinterval(old)
    by_weight: dict[int, set] = {}
    for rs in results:
        for wid, p in rs:
            by_weight.setdefault(wid, set()).add(id(p))
    assert len(by_weight) == len(shared)
    assert all(len(ids) == 1 for ids in by_weight.values()), "one shared weight got two packings"
    # the shared packing is the single-threaded one too
    for w in shared:
        p = pack(w, 4, 16)
        assert {id(p)} == by_weight[id(w)]


# ------------------------------------------------------------------------------ numpy / interpreter
@pytest.mark.parametrize(
    "triton_v, numpy_v, broken",
    [("3.6.0", "2.4.0", True), ("3.6.0", "2.4.0rc1", True), ("3.5.1", "2.5.0", True), ("3.6.0", "2.3.5", False),
     ("3.6.0", "1.26.4", False), ("3.7.0", "2.4.0", False)],
)
def test_interpreter_numpy_problem(triton_v, numpy_v, broken):
    msg = _backend.interpreter_numpy_problem(triton_v, numpy_v)
    assert (msg is not None) == broken
    if broken:
        assert "numpy<2.4" in msg and numpy_v in msg and "TRITON_INTERPRET" in msg


def test_broken_interpreter_numpy_is_reported_before_a_launch(monkeypatch):
    import numpy

    pytest.importorskip("triton")
    monkeypatch.setattr(_backend, "interpret_mode", lambda: True)
    monkeypatch.setattr(numpy, "__version__", "2.4.0")
    import triton

    monkeypatch.setattr(triton, "__version__", "3.6.0")
    _backend.check_interpreter_numpy.cache_clear()
    try:
        with lowbit.backend("triton"):
            with pytest.raises(RuntimeError, match=r"numpy<2\.4"):
                use_triton(torch.zeros(2))
        with lowbit.backend("reference"):  # the reference tier is unaffected
            assert use_triton(torch.zeros(2)) is False
    finally:
        _backend.check_interpreter_numpy.cache_clear()
