"""lowbit.distributed: vocab sharding, the exact key merge, and ParallelDraftHead over gloo.

The multi-process tests start 2 and 4 fresh CPU processes (gloo over 127.0.0.1). Every process
builds the same seeded full weight, takes its shard, and checks the sharded head against the
single-process head over the full weight computed in that same process: indices equal (ties by
lower global index), values bit for bit where the arithmetic is exact, else to fp32 summation
order. Failures come back through a queue; a bounded wait turns a hang into a failure instead of a
stalled CI job.
"""
from __future__ import annotations

import dataclasses
import datetime
import os
import queue
import socket
import time
import traceback

import pytest
import torch

from lowbit.distributed import (
    ParallelDraftHead,
    decode_keys,
    encode_keys,
    merge_topk,
    shard_vocab,
    slice_rows,
    vocab_boundaries,
)

# DraftHead settings for every comparison: a coarse 4-bit pass, certified (exact) selection.
HEAD_KWARGS = dict(bits=4, group_size=32, mode="certified")
SPAWN_TIMEOUT_S = 120


class ExactDenseHead:
    """An oracle local head: fp64 logits rounded to fp32, stable sort (ties -> lower index)."""

    def __init__(self, weight: torch.Tensor):
        self.weight = weight

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        return (x.double() @ self.weight.double().T).float()

    def topk(self, x: torch.Tensor, k: int):
        logits = self.logits(x)
        order = torch.sort(logits, dim=-1, descending=True, stable=True).indices[:, :k]
        return logits.gather(-1, order), order


def brute_topk(x: torch.Tensor, weight: torch.Tensor, k: int):
    return ExactDenseHead(weight).topk(x, k)


def draft_head(weight, **overrides):
    from lowbit.nn.draft_head import DraftHead

    return DraftHead(weight, **{**HEAD_KWARGS, **overrides})


# Problems. integer_problem and planted_tie_problem use small integers times powers of two: every
# dot product is exact in fp32 whatever the order of summation, so values tie exactly where they
# should and any two correct heads agree bit for bit. random_problem is ordinary float data.

def integer_problem(n: int, k_dim: int, m: int, seed: int, span: int = 2):
    g = torch.Generator().manual_seed(seed)
    w = torch.randint(-span, span + 1, (n, k_dim), generator=g).float()
    x = torch.randint(-span, span + 1, (m, k_dim), generator=g).float()
    return w, x


def random_problem(n: int, k_dim: int, m: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, k_dim, generator=g) * 0.05, torch.randn(m, k_dim, generator=g)


def planted_tie_problem(n: int, k_dim: int, m: int, seed: int, rows: list[int]):
    """Rows ``rows`` are identical and strictly the best for every x row (an exact tie)."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randint(-1, 2, (n, k_dim), generator=g).float() * 0.25
    x = torch.randint(1, 4, (m, k_dim), generator=g).float() * 0.5  # positive
    w[rows] = 1.0  # dot = sum(x) > any row with entries <= 0.25
    return w, x


# in-process tests

def test_vocab_boundaries_even_split():
    assert vocab_boundaries(248320, 2) == [0, 124160, 248320]
    assert vocab_boundaries(248320, 8)[1] == 31040
    assert vocab_boundaries(10, 4) == [0, 3, 6, 9, 10]  # last rank smaller
    assert vocab_boundaries(9, 4) == [0, 3, 6, 9, 9]  # ceil split can leave the last rank empty
    assert vocab_boundaries(7, 1) == [0, 7]
    assert vocab_boundaries(10, 3, [0, 1, 1, 10]) == [0, 1, 1, 10]


@pytest.mark.parametrize("bad", [[0, 5], [1, 5, 10], [0, 6, 5, 10], [0, 5, 9]])
def test_vocab_boundaries_rejects_bad_split(bad):
    world = 3 if len(bad) == 4 else 2
    with pytest.raises(ValueError, match="boundaries"):
        vocab_boundaries(10, world, bad)


def test_shard_vocab_dense_tiles_the_weight():
    w = torch.randn(1001, 64)
    for world, bounds in ((3, None), (4, [0, 10, 10, 600, 1001])):
        shards = [shard_vocab(w, r, world, bounds) for r in range(world)]
        starts = [s for _, s in shards]
        assert starts == vocab_boundaries(1001, world, bounds)[:-1]
        assert torch.equal(torch.cat([sh for sh, _ in shards]), w)
    with pytest.raises(ValueError, match="rank"):
        shard_vocab(w, 3, 3)


def test_shard_vocab_formats_match_dequantized_rows():
    from lowbit.formats import FP8, INTx, MXFP4, NVFP4

    w = torch.randn(300, 64)
    for fmt in (FP8.quantize(w, "row"), FP8.quantize(w, "tensor"), NVFP4.quantize(w), MXFP4.quantize(w),
                INTx.quantize(w, bits=2, group_size=32), FP8.quantize(w, "block", block_size=128)):
        full = fmt.dequantize()
        bounds = [0, 128, 256, 300]  # on 128-blocks, so FP8 block scales split cleanly
        for r in range(3):
            shard, start = shard_vocab(fmt, r, 3, bounds)
            assert type(shard) is type(fmt) and start == bounds[r]
            assert torch.equal(shard.dequantize(), full[bounds[r]:bounds[r + 1]]), type(fmt).__name__
    with pytest.raises(ValueError, match="multiples of 128"):
        slice_rows(FP8.quantize(w, "block"), 100, 300)


def test_encode_decode_roundtrip_and_order():
    specials = [float("-inf"), -3.4e38, -2.5, -1e-45, -0.0, 0.0, 1e-45, 1.0, 1.0, 2.5, 3.4e38, float("inf")]
    values = torch.tensor(specials + torch.randn(500).tolist()).view(1, -1)
    indices = torch.randperm(values.shape[1]).view(1, -1) * 977 + 3
    keys = encode_keys(values, indices)
    dv, di = decode_keys(keys)
    assert torch.equal(dv, values) and torch.equal(di, indices)
    # the key order is (value descending, index ascending): compare with a stable fp64 sort
    order = keys[0].argsort(descending=True)
    by_index = indices[0].argsort()
    ref = by_index[torch.sort(values[0][by_index].double(), descending=True, stable=True).indices]
    assert torch.equal(order, ref)


def test_merge_topk_ties_by_lower_index():
    g = torch.Generator().manual_seed(1)
    m, n = 5, 400
    values = torch.randint(-3, 4, (m, n), generator=g).float()  # heavy ties
    indices = torch.stack([torch.randperm(10_000, generator=g)[:n] for _ in range(m)])
    for k in (1, 7, 64, n):
        v, i = merge_topk(values, indices, k)
        for row in range(m):
            pairs = sorted(zip(values[row].tolist(), indices[row].tolist()), key=lambda p: (-p[0], p[1]))[:k]
            assert v[row].tolist() == [p[0] for p in pairs] and i[row].tolist() == [p[1] for p in pairs]
    # the candidates' column order does not matter, and the inputs are not mutated
    perm = torch.randperm(n, generator=g)
    before = values.clone(), indices.clone()
    assert all(torch.equal(a, b) for a, b in zip(merge_topk(values, indices, 50),
                                                 merge_topk(values[:, perm], indices[:, perm], 50)))
    assert torch.equal(values, before[0]) and torch.equal(indices, before[1])


def test_merge_topk_validation():
    v, i = torch.zeros(2, 4), torch.arange(8).view(2, 4)
    with pytest.raises(ValueError, match="k=5"):
        merge_topk(v, i, 5)
    with pytest.raises(ValueError, match="dtype"):
        merge_topk(v.double(), i, 1)
    with pytest.raises(ValueError, match="same shape"):
        merge_topk(v, i[:, :3], 1)


def _rank_candidates(g, world: int, m: int, kk: int, rows: int = 100):
    """Per rank: (values fp32 [m, kk] as a strided view, local indices int64 [m, kk]) with heavy
    ties and the special values, and its vocab_start = rank * rows."""
    out = []
    for r in range(world):
        wide = torch.randint(-3, 4, (m, 2 * kk), generator=g).float()
        specials = torch.tensor([-0.0, 0.0, float("inf"), float("-inf"), 1e-45, -1e-45])
        pick = torch.randint(0, 3 * len(specials), (m, 2 * kk), generator=g)
        wide = torch.where(pick < len(specials), specials[pick.clamp_max(len(specials) - 1)], wide)
        idx = torch.stack([torch.randperm(rows, generator=g)[:kk] for _ in range(m)])
        out.append((wide[:, ::2], idx, r * rows))  # a non-contiguous values view
    return out


@pytest.mark.parametrize("world,m,k,kk", [(1, 1, 1, 1), (3, 5, 7, 4), (4, 2, 16, 16), (2, 3, 5, 3), (8, 1, 8, 1),
                                          (3, 2, 6, 2), (2, 1, 33, 30)])
def test_encode_merge_ops_match_brute_force(backend, world, m, k, kk):
    """The encode-pad and merge ops (Triton on the interpret / cuda tiers) against a Python sort
    of every real pair, with ties, +-0, +-inf, subnormals, padding (kk < k) and strided input."""
    from lowbit.distributed import _merge, _ops

    g = torch.Generator().manual_seed(world * 100 + k)
    ranks = _rank_candidates(g, world, m, kk)
    keys = []
    with backend.active():
        for values, idx, start in ranks:
            got = _ops.encode_pad(values.to(backend.device), idx.to(backend.device), start, k)
            want = _merge.encode_pad(values.contiguous(), idx, start, k)
            assert torch.equal(got.cpu(), want), "keys differ from the reference bit pattern"
            keys.append(got)
        gathered = torch.stack(keys)
        out_v, out_i = _ops.merge_gathered(gathered, k)
    assert out_v.dtype == torch.float32 and out_i.dtype == torch.int64 and out_v.shape == (m, k)
    for row in range(m):
        pairs = sorted(((v, i + start) for values, idx, start in ranks
                        for v, i in zip(values[row].tolist(), idx[row].tolist())), key=lambda p: (-p[0], p[1]))[:k]
        assert out_v[row].tolist() == [p[0] for p in pairs] and out_i[row].tolist() == [p[1] for p in pairs]


@pytest.mark.cuda
def test_encode_merge_ops_opcheck():
    from lowbit.distributed import _ops

    values = torch.randn(3, 5, device="cuda")
    idx = torch.randint(0, 100, (3, 5), device="cuda")
    torch.library.opcheck(_ops._encode_op, (values, idx, 200, 8))
    keys = _ops.encode_pad(values, idx, 200, 8)
    torch.library.opcheck(_ops._merge_op, (torch.stack([keys, keys + 1]), 8))


def test_world_size_one_oracle_head_without_process_group():
    w, x = integer_problem(700, 64, 4, seed=2)
    head = ParallelDraftHead(w, 0, 700, local_head=ExactDenseHead(w))
    for k in (1, 13, 700):
        v, i = head.topk(x, k)
        rv, ri = brute_topk(x, w, k)
        assert torch.equal(v, rv) and torch.equal(i, ri)
    assert torch.equal(head.argmax(x), brute_topk(x, w, 1)[1][:, 0])


def test_world_size_one_matches_draft_head():
    """TP = 1: the parallel head is the single-process DraftHead, values and indices equal."""
    for w, x in (integer_problem(1200, 64, 3, seed=3), random_problem(1500, 128, 2, seed=4)):
        ref = draft_head(w)
        head = ParallelDraftHead(w, 0, w.shape[0], **HEAD_KWARGS)
        for k in (1, 9):
            v, i = head.topk(x, k)
            rv, ri = ref.topk(x, k)
            assert torch.equal(v, rv) and torch.equal(i, ri)
        assert torch.equal(head.argmax(x), ref.topk(x, 1)[1][:, 0])


def test_validation_errors():
    w = torch.randn(50, 32)
    oracle = ExactDenseHead(w)
    with pytest.raises(ValueError, match="whole vocabulary"):
        ParallelDraftHead(w, 0, 80, local_head=oracle)
    with pytest.raises(ValueError, match="inside the vocabulary"):
        ParallelDraftHead(w, 40, 80, local_head=oracle)
    head = ParallelDraftHead(w, 0, 50, local_head=oracle)
    with pytest.raises(ValueError, match=r"\[M, 32\]"):
        head.topk(torch.randn(2, 31), 1)
    with pytest.raises(ValueError, match="k must be"):
        head.topk(torch.randn(2, 32), 51)
    with pytest.raises(ValueError, match="dims"):
        head.topk(torch.randn(32), 1)

    class Float64Head(ExactDenseHead):
        def topk(self, x, k):
            v, i = super().topk(x, k)
            return v.double(), i

    with pytest.raises(ValueError, match="local head returned"):
        ParallelDraftHead(w, 0, 50, local_head=Float64Head(w)).topk(torch.randn(2, 32), 3)


# multi-process (gloo) tests

@dataclasses.dataclass
class Case:
    name: str
    problem: tuple  # (weight, x)
    bounds: list | None  # explicit boundaries, or None for the even ceil split
    ks: tuple
    exact_values: bool  # exact arithmetic: the oracle's values must match bit for bit too
    fmt: str | None = None  # "fp8" (row scales) / "nvfp4": the heads get that format, coarse = its own rows


def _cases(world: int) -> list[Case]:
    n_even = 2000
    even_b = vocab_boundaries(n_even, world)
    cross = even_b[1] if world > 1 else n_even // 2  # a shard boundary (rank 0 | rank 1)
    uneven = {1: [0, 1800], 2: [0, 5, 1800], 4: [0, 3, 3, 1111, 1800]}[world]  # tiny + empty shards
    return [
        Case("random-even", random_problem(n_even, 128, 5, seed=10), None, (1, 8), False),
        Case("integer-ties-even", integer_problem(n_even, 64, 5, seed=11), None, (1, 10, 40), True),
        Case("integer-ties-uneven", integer_problem(1800, 64, 3, seed=12), uneven, (1, 8, 33), True),
        Case("planted-tie-across-boundary", planted_tie_problem(n_even, 64, 2, seed=13,
                                                                rows=[cross + 1, cross, cross - 1]),
             None, (1, 2, 3, 5), True),
        Case("random-m1-uneven", random_problem(1800, 64, 1, seed=14), uneven, (1, 6), False),
        Case("fp8-row-random-even", random_problem(n_even, 64, 2, seed=15), None, (1, 5), False, "fp8"),
        Case("nvfp4-random-uneven", random_problem(1800, 64, 2, seed=16), uneven, (1, 5), False, "nvfp4"),
    ]


def _values_match(v: torch.Tensor, ref: torch.Tensor, exact: bool) -> bool:
    """Bitwise where the arithmetic is exact. Otherwise the two heads may sum a logit in another
    order (DraftHead's rerank tiles depend on how many candidates it rescored, and a fallback row
    is a full matmul): |error| <= K * 2^-24 * sum|x_k w_k|, and sum|x_k w_k| ~ K * 0.05 * 0.64
    for random_problem, so at worst 128 * 6e-8 * 4 ~ 3e-5 (about 1e-6 typically); 1e-4 absolute
    leaves margin and is still far below the ~1e-2 gaps between the top logits."""
    return torch.equal(v, ref) if exact else torch.allclose(v, ref, rtol=0, atol=1e-4)


def _check(case: Case, oracle: bool, world: int, rank: int, group, device="cpu") -> list[str]:
    """Compare one sharded head with the unsharded one; return failure messages.

    ``oracle``: the local heads are :class:`ExactDenseHead` (tests the exchange and merge alone);
    otherwise ParallelDraftHead builds its own DraftHead and the reference is DraftHead(w).
    """
    from lowbit.formats import FP8, NVFP4

    w, x = (t.to(device) for t in case.problem)
    n = w.shape[0]
    overrides = {}
    if case.fmt is not None:
        w = FP8.quantize(w, "row") if case.fmt == "fp8" else NVFP4.quantize(w)
        overrides = {"bits": None}  # DraftHead's native coarse pass over the format's own rows
    dense = w if isinstance(w, torch.Tensor) else w.dequantize()
    if oracle:
        shard, start = shard_vocab(dense, rank, world, case.bounds)
        par = ParallelDraftHead(shard, start, n, group=group, local_head=ExactDenseHead(shard))
        ref = ExactDenseHead(dense)
    else:
        shard, start = shard_vocab(w, rank, world, case.bounds)
        par = ParallelDraftHead(shard, start, n, group=group, **{**HEAD_KWARGS, **overrides})
        ref = draft_head(w, **overrides)
    failures = []
    for k in case.ks:
        v, i = par.topk(x, k)
        rv, ri = ref.topk(x, k)
        ov, oi = brute_topk(x, dense, k)
        if not (torch.equal(i, ri) and _values_match(v, rv, case.exact_values)):
            failures.append(f"{case.name} k={k}: sharded {i.tolist()} {v.tolist()} != unsharded {ri.tolist()} {rv.tolist()}")
        if not torch.equal(i, oi) or (case.exact_values and not torch.equal(v, ov)):
            failures.append(f"{case.name} k={k}: indices {i.tolist()} != oracle {oi.tolist()}")
    if not torch.equal(par.argmax(x), ref.topk(x, 1)[1][:, 0]):
        failures.append(f"{case.name}: argmax differs")
    if case.name.startswith("planted"):
        b = n // 2 if world == 1 else vocab_boundaries(n, world)[1]
        if par.topk(x, 3)[1].tolist() != [[b - 1, b, b + 1]] * x.shape[0]:
            failures.append(f"{case.name}: tie across row {b} not broken by lower index")
    return [f"TP={world} rank={rank}: {f}" for f in failures]


def _worker(rank: int, world: int, port: int, results, backend: str) -> None:
    import torch.distributed as dist

    failures: list[str] = []
    try:
        torch.set_num_threads(1)
        if backend == "nccl":
            # NVLink multicast stays off on the lent multi-GPU machines (set before init)
            for var, val in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
                             ("NVSHMEM_DISABLE_NVLS", "1")):
                os.environ.setdefault(var, val)
            torch.cuda.set_device(rank)
            device = torch.device("cuda", rank)
        else:
            if "lo" in {name for _, name in socket.if_nameindex()}:
                os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # keep gloo on loopback
            device = torch.device("cpu")
        import lowbit

        lowbit.set_backend("reference" if backend == "gloo" else "auto")
        store = dist.TCPStore("127.0.0.1", port, world, is_master=False, timeout=datetime.timedelta(seconds=60))
        dist.init_process_group(backend, store=store, rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=60))
        for case in _cases(world):
            for oracle in (True, False):
                tag = "oracle" if oracle else "draft"
                failures += [f"[{tag}] {f}" for f in _check(case, oracle, world, rank, None, device)]
        if world == 4:
            # two TP=2 groups side by side: group ranks differ from global ranks
            pairs = [dist.new_group([0, 1]), dist.new_group([2, 3])]
            group, sub_rank = pairs[rank // 2], rank % 2
            for case in _cases(2):
                failures += [f"[draft, subgroup {rank // 2}] {f}"
                             for f in _check(case, False, 2, sub_rank, group, device)]
        dist.barrier()
        dist.destroy_process_group()
    except Exception:  # report everything; the parent fails the test with it
        failures.append(f"rank {rank} raised:\n{traceback.format_exc()}")
    results.put((rank, failures))


def _spawn(world: int, backend: str = "gloo") -> dict[int, list[str]]:
    import torch.distributed as dist
    import torch.multiprocessing as mp

    # forkserver: each rank is a fresh process (never a fork of this one, which may hold threads
    # and a CUDA context), forked from a server that imported torch and this module once, so the
    # ranks skip the import of torch that dominates a spawned rank's start (seconds each).
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "torch.distributed", __name__])
    # the parent hosts the rendezvous store on an OS-chosen free port: no race for a port
    store = dist.TCPStore("127.0.0.1", 0, None, is_master=True, wait_for_workers=False)
    results = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(r, world, store.port, results, backend), daemon=True) for r in range(world)]
    for p in procs:
        p.start()
    reports: dict[int, list[str]] = {}
    deadline = time.monotonic() + SPAWN_TIMEOUT_S
    try:
        while len(reports) < world and time.monotonic() < deadline:
            try:
                rank, failures = results.get(timeout=1.0)
                reports[rank] = failures
            except queue.Empty:
                dead = [r for r, p in enumerate(procs) if p.exitcode not in (None, 0) and r not in reports]
                if dead:
                    break
        for p in procs:
            p.join(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(timeout=10)
    for r, p in enumerate(procs):
        if r not in reports:
            reports[r] = [f"rank {r} did not report (exit code {p.exitcode}; hang or crash, waited {SPAWN_TIMEOUT_S}s)"]
    return reports


@pytest.mark.distributed
@pytest.mark.parametrize("world", [2, 4])
def test_parallel_head_gloo_matches_unsharded(world):
    reports = _spawn(world)
    failures = [f for r in sorted(reports) for f in reports[r]]
    assert not failures, "\n".join(failures[:20])


@pytest.mark.cuda
@pytest.mark.distributed
@pytest.mark.parametrize("world", [2, 4])
def test_parallel_head_nccl_matches_unsharded(world):
    """The same checks over NCCL, one GPU a rank (Triton DraftHead). Needs ``world`` GPUs."""
    if torch.cuda.device_count() < world:
        pytest.skip(f"needs {world} GPUs for NCCL TP={world}, found {torch.cuda.device_count()}")
    reports = _spawn(world, "nccl")
    failures = [f for r in sorted(reports) for f in reports[r]]
    assert not failures, "\n".join(failures[:20])


@pytest.mark.cuda
def test_world_size_one_matches_draft_head_cuda():
    failures = []
    for case in _cases(1):
        failures += _check(case, True, 1, 0, None, "cuda") + _check(case, False, 1, 0, None, "cuda")
    assert not failures, "\n".join(failures[:20])
