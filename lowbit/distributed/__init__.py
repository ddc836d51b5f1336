"""Tensor-parallel helpers: a vocabulary-sharded draft head whose top-k crosses ranks as k pairs.

* :class:`ParallelDraftHead` -- exact global ``argmax`` / ``topk`` of a vocab-parallel LM head:
  each rank's certified local top-k, one all-gather of ``[M, k]`` int64 keys, a final top-k.
* :func:`shard_vocab`, :func:`vocab_boundaries` -- the engines' even (ceil) split or explicit
  uneven boundaries, for dense weights and lowbit formats.
* :func:`merge_topk` -- the exact merge (descending, ties by lower index) on its own.

Works with NCCL (CUDA tensors) and gloo (CPU tensors). See docs/distributed.md.
"""
from lowbit.distributed._merge import decode_keys, encode_keys, merge_topk
from lowbit.distributed._shard import shard_vocab, slice_rows, vocab_boundaries
from lowbit.distributed.head import ParallelDraftHead

__all__ = ["ParallelDraftHead", "decode_keys", "encode_keys", "merge_topk", "shard_vocab", "slice_rows",
           "vocab_boundaries"]
