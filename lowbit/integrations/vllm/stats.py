"""Per-process counters of what the plugin served, and their JSON dump.

Counters are host integers bumped by the Python call (no device sync). With
``LOWBIT_VLLM_STATS=<dir>`` every change is written to ``<dir>/lowbit-vllm-<pid>.json``
(write-then-rename, so a reader never sees half a file); vLLM runs the model in worker processes,
so a reader sums the files of every pid. Calls replayed from a captured CUDA graph run no Python
and are not counted. No vLLM import.

File content (docs/vllm.md): ``{"pid", "counts": {name: int}, "heads": [str], "fallbacks": [str]}``
with counts ``draft_calls`` / ``draft_rows`` (drafter argmax calls / rows answered by lowbit),
``draft_vllm_calls`` (drafter calls left to vLLM), ``draft_topk_calls`` / ``draft_topk_rows`` /
``draft_topk_vllm_calls`` (the same for the drafter's top-k), ``markov_calls`` / ``markov_vllm_calls``.
"""
from __future__ import annotations

import json
import logging
import os
import threading

from lowbit.integrations.vllm.config import settings

# A child of vLLM's logger, so vLLM's logging configuration (handler, level, format) applies.
logger = logging.getLogger("vllm.lowbit")

COUNTS = ("draft_calls", "draft_rows", "draft_vllm_calls", "draft_topk_calls", "draft_topk_rows",
          "draft_topk_vllm_calls", "markov_calls", "markov_vllm_calls")

_lock = threading.Lock()
_counts = dict.fromkeys(COUNTS, 0)
_heads: list[str] = []
_fallbacks: list[str] = []


def count(**increments: int) -> None:
    """Add to the named counts (of ``COUNTS``); one dump for all of them."""
    with _lock:
        for name, n in increments.items():
            _counts[name] += n
    _dump()


def built(description: str) -> None:
    """Record (and log at INFO) a head built by the plugin."""
    with _lock:
        _heads.append(description)
    logger.info("lowbit: %s", description)
    _dump()


def fallback_once(reason: str) -> None:
    """Log (once per process per reason, INFO) why vLLM's own path is kept."""
    with _lock:
        if reason in _fallbacks:
            return
        _fallbacks.append(reason)
    logger.info("lowbit: keeping vLLM's path: %s", reason)
    _dump()


def snapshot() -> dict:
    with _lock:
        return {"pid": os.getpid(), "counts": dict(_counts), "heads": list(_heads), "fallbacks": list(_fallbacks)}


def reset() -> None:
    with _lock:
        for k in _counts:
            _counts[k] = 0
        _heads.clear()
        _fallbacks.clear()


def _dump() -> None:
    folder = settings().stats_dir
    if folder is None:
        return
    data = snapshot()
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"lowbit-vllm-{data['pid']}.json")
    tmp = f"{path}.{threading.get_ident()}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def read(folder: str) -> dict:
    """Sum the counts of every process's file under ``folder`` (what a test reads)."""
    total = dict.fromkeys(COUNTS, 0)
    heads, fallbacks, pids = [], [], []
    for name in sorted(os.listdir(folder)):
        if not (name.startswith("lowbit-vllm-") and name.endswith(".json")):
            continue
        with open(os.path.join(folder, name)) as f:
            data = json.load(f)
        pids.append(data["pid"])
        for k, v in data["counts"].items():
            total[k] = total.get(k, 0) + v
        heads += data["heads"]
        fallbacks += data["fallbacks"]
    return {"pids": pids, "counts": total, "heads": heads, "fallbacks": fallbacks}
