"""ParallelDraftHead: the exact global top-k of a vocabulary-sharded LM head, O(k) traffic."""
from __future__ import annotations

import importlib

import torch
import torch.distributed as dist

from lowbit._validate import check_tensor, require
from lowbit.distributed import _ops
from lowbit.distributed._merge import MAX_INDEX, PAD_KEY
from lowbit.distributed._shard import weight_shape


def _all_gather_flat(out: torch.Tensor, inp: torch.Tensor, group) -> None:
    """All-gather a contiguous 1-D ``inp [n]`` into ``out [world * n]`` (rank r at ``[r*n, (r+1)*n)``).

    1-D buffers because gloo chunks the output along dim 0 and rejects a stacked
    ``[world, *shape]`` output that NCCL accepts. ``all_gather_single`` is the newer name of
    ``all_gather_into_tensor`` (torch 2.13 warns on the old one); use it where it exists.
    """
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    gather(out, inp, group=group)


def _build_local_head(weight, mode, head_kwargs):
    # imported on first use: a caller with its own local_head needs none of the ops behind DraftHead
    draft_head = importlib.import_module("lowbit.nn.draft_head")
    return draft_head.DraftHead(weight, mode=mode, **head_kwargs)


class ParallelDraftHead(torch.nn.Module):
    """A tensor-parallel LM head's exact global ``argmax`` / ``topk`` with O(k) communication.

    Each rank holds the rows ``[vocab_start, vocab_start + rows)`` of a ``[vocab_size, K]`` head
    (see :func:`shard_vocab`; uneven and empty shards are allowed, but together the shards must
    tile ``[0, vocab_size)`` exactly, which is checked once at construction). A call:

    1. computes this rank's exact top-``min(k, rows)`` with a certified :class:`lowbit.DraftHead`
       over its shard, turns local indices into global ones (``+ vocab_start``) and pads to ``k``
       pairs with ``(-inf, 2^32 - 1)`` (never selected, since ``k <= vocab_size``);
    2. packs each (fp32 value, global index) pair into one int64 key (``_merge.py``) and
       all-gathers the ``[M, k]`` keys of every rank (one collective);
    3. takes the top ``k`` of the ``world * k`` keys. Every rank gets the same answer.

    Step 1's packing and step 3 are one Triton kernel each on CUDA tensors (``lowbit::topk_encode_pad``,
    ``lowbit::topk_merge``; the PyTorch reference elsewhere), so a call is the local head, two
    small launches and the collective.

    Result: the exact global top-k, the same as the single-process
    ``DraftHead(full_weight).topk(x, k)``. The values are the local heads' exact fp32 dot
    products passed through bit for bit; the unsharded head may sum the same dot in another
    order (its rerank tiling depends on how many candidates it rescored), so values can differ
    in the last bits, and only logits within that rounding of each other can swap. Where the
    arithmetic is exact the two agree bit for bit, ties included. **Tie rule:** descending
    value, and equal values by *lower global index*. It holds across ranks by construction (the
    key order is total) and within a rank because ``DraftHead.topk`` breaks ties the same way;
    ``-0.0`` and ``+0.0`` are equal (the returned zero is ``+0.0``). NaN logits are outside the
    contract.

    ``DraftHead`` in certified mode reads one count back to the host per call (its fallback
    check), so this head is not CUDA-graph capturable in that mode.

    **Traffic** per call: each rank sends ``M * k * 8`` bytes and receives
    ``world * M * k * 8`` bytes (a plain exchange of fp32 values and int64 indices would be
    ``world * M * k * (4 + 8)``); all-gathering full logits instead receives ``M * vocab_size * 2``
    bytes in bf16. At M = 1, k = 16, TP 8, vocab 248320: 1 KiB instead of 485 KiB.

    Args:
        weight: this rank's shard, dense ``[rows, K]`` (bf16/fp16/fp32) or a lowbit format
            (FP8 / NVFP4 / ...); it is handed to ``DraftHead`` and never mutated.
        vocab_start: global index of the shard's first row.
        vocab_size: rows of the full head (all ranks), ``< 2^32 - 1``.
        group: the tensor-parallel process group (default: the world). Without an initialized
            process group the head runs alone (world size 1) and must own the whole vocabulary.
        local_head: use this object's ``topk(x, k)`` (exact, sorted, ties by lower index, as
            ``DraftHead.topk``) instead of building a ``DraftHead``, e.g. to share a head.
        mode: DraftHead mode. Only ``"certified"`` (default) gives the exact top-k that makes the
            global result exact; ``"fast"`` is merged the same way but is only as good as each
            rank's approximate local top-k.
        validate: check at construction, with one small all-gather, that the shards tile the
            vocabulary; it is a collective, so every rank of ``group`` must construct together.
        **head_kwargs: passed to ``DraftHead`` (``bits``, ``group_size``, ``kcand``, ``rerank``, ...).

    ``x`` must be the same ``[M, K]`` activation on every rank (as after the tensor-parallel
    all-reduce); it is not checked per call (that would cost a collective).
    """

    def __init__(self, weight, vocab_start: int, vocab_size: int, *, group=None, local_head=None,
                 mode: str = "certified", validate: bool = True, **head_kwargs):
        super().__init__()
        rows, k_dim = weight_shape(weight)
        require(isinstance(vocab_size, int) and 1 <= vocab_size < MAX_INDEX,
                f"vocab_size must be an int in [1, {MAX_INDEX}), got {vocab_size!r}")
        require(isinstance(vocab_start, int) and 0 <= vocab_start and vocab_start + rows <= vocab_size,
                f"shard rows [{vocab_start}, {vocab_start}+{rows}) must lie inside the vocabulary [0, {vocab_size})")
        if dist.is_available() and dist.is_initialized():
            self.rank, self.world_size = dist.get_rank(group), dist.get_world_size(group)
        else:
            require(group is None, "a process group was given but torch.distributed is not initialized")
            self.rank, self.world_size = 0, 1
        if self.world_size == 1:
            require(vocab_start == 0 and rows == vocab_size,
                    f"with world size 1 the shard must be the whole vocabulary, got rows [{vocab_start}, "
                    f"{vocab_start + rows}) of {vocab_size}")
        self.group = group
        self.vocab_start, self.vocab_size, self.rows, self.k_dim = vocab_start, vocab_size, rows, k_dim
        if local_head is None and rows > 0:
            local_head = _build_local_head(weight, mode, head_kwargs)
        self.local_head = local_head
        if validate and self.world_size > 1:
            self._check_tiling(weight.device)

    def _check_tiling(self, device) -> None:
        mine = torch.tensor([self.vocab_start, self.rows, self.vocab_size], dtype=torch.int64, device=device)
        every = torch.empty(self.world_size * 3, dtype=torch.int64, device=device)
        _all_gather_flat(every, mine, self.group)
        shards = [tuple(r) for r in every.view(self.world_size, 3).tolist()]
        sizes = {s[2] for s in shards}
        require(len(sizes) == 1, f"ranks disagree on vocab_size: {sorted(sizes)}")
        cursor = 0
        for start, rows, _ in sorted(s for s in shards if s[1] > 0):
            require(start == cursor, f"shards (start, rows, vocab) {shards} do not tile [0, {self.vocab_size}): "
                                     f"gap or overlap at row {min(start, cursor)}")
            cursor = start + rows
        require(cursor == self.vocab_size, f"shards (start, rows, vocab) {shards} cover only [0, {cursor}) of {self.vocab_size}")

    def local_keys(self, x: torch.Tensor, k: int) -> torch.Tensor:
        """This rank's contribution: int64 keys ``[M, k]`` of its top-``min(k, rows)``, padded."""
        m = x.shape[0]
        kk = min(k, self.rows)
        if kk == 0:
            return torch.full((m, k), PAD_KEY, dtype=torch.int64, device=x.device)
        values, indices = self.local_head.topk(x, kk)
        # checked with a plain `if`: the messages are formatted only on failure (this runs per call)
        if not (values.shape == (m, kk) and indices.shape == (m, kk)
                and values.dtype == torch.float32 and indices.dtype == torch.int64):
            raise ValueError(f"local head returned values {tuple(values.shape)} {values.dtype} / indices "
                             f"{tuple(indices.shape)} {indices.dtype}, expected ({m}, {kk}) float32 / int64")
        return _ops.encode_pad(values, indices, self.vocab_start, k)

    def topk(self, x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Exact global top-k: ``(values fp32 [M, k], indices int64 [M, k])`` on every rank.

        x ``[M, K]`` (the dtype the local head takes), identical on all ranks; ``1 <= k <=
        vocab_size``. Sorted descending, ties by lower global index. Nothing is mutated.
        """
        if not (isinstance(x, torch.Tensor) and x.dim() == 2 and x.shape[1] == self.k_dim):
            check_tensor("x", x, ndim=2)
            raise ValueError(f"x has shape {tuple(x.shape)}; expected [M, {self.k_dim}] for this head")
        if not (isinstance(k, int) and 1 <= k <= self.vocab_size):
            raise ValueError(f"k must be an int in [1, {self.vocab_size}], got {k!r}")
        keys = self.local_keys(x, k)
        m = keys.shape[0]
        if self.world_size == 1:
            return _ops.merge_gathered(keys.view(1, m, k), k)
        gathered = torch.empty(self.world_size * m * k, dtype=torch.int64, device=keys.device)
        _all_gather_flat(gathered, keys.reshape(-1), self.group)
        return _ops.merge_gathered(gathered.view(self.world_size, m, k), k)

    def argmax(self, x: torch.Tensor) -> torch.Tensor:
        """Exact global argmax, int64 ``[M]`` (ties: the lower global index); same on every rank."""
        return self.topk(x, 1)[1][:, 0]

    def extra_repr(self) -> str:
        return (f"rows=[{self.vocab_start}, {self.vocab_start + self.rows}) of {self.vocab_size}, K={self.k_dim}, "
                f"rank={self.rank}/{self.world_size}")
