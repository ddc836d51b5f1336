"""The plugin's settings, read from environment variables (docs/vllm.md lists them).

:func:`settings` parses and validates the variables once per process; every bad value is a
``ValueError`` naming the variable and the accepted values. No vLLM import.
"""
from __future__ import annotations

import dataclasses
import math
import os

#: ``LOWBIT_VLLM`` values. ``draft``: the drafter's greedy token from a lowbit DraftHead, plus the
#: DSpark Markov-head adapter. ``markov``: the Markov-head adapter alone.
PARTS = {"draft": ("draft", "markov"), "markov": ("markov",)}
_OFF = ("", "0", "off", "none")


@dataclasses.dataclass(frozen=True)
class Settings:
    """What the plugin swaps and how the draft head is built.

    ``head_kwargs`` are :class:`lowbit.DraftHead` keyword arguments (only those the user set; the
    head's own per-mode defaults fill the rest). ``warmup_m``: a CUDA head is warmed up for up to
    this many rows when built (0: not at all). ``stats_dir``: where call counts are written, or
    None.
    """

    mode: str  # the LOWBIT_VLLM value ("" = off)
    draft: bool
    markov: bool
    head_kwargs: dict
    warmup_m: int
    stats_dir: str | None

    @property
    def enabled(self) -> bool:
        return self.draft or self.markov


def _env(env, name):
    return env.get(name, "").strip()


def _int(env, name, lo, hi=None, power_of_two=False, multiple=None):
    raw = _env(env, name)
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {raw!r}") from None
    if value < lo or (hi is not None and value > hi):
        span = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise ValueError(f"{name} must be {span}, got {value}")
    if power_of_two and value & (value - 1):
        raise ValueError(f"{name} must be a power of two, got {value}")
    if multiple and value % multiple:
        raise ValueError(f"{name} must be a multiple of {multiple}, got {value}")
    return value


def _choice(env, name, choices):
    raw = _env(env, name).lower()
    if not raw:
        return None
    if raw not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}; got {raw!r}")
    return raw


def parse(env=None) -> Settings:
    """Settings from ``env`` (default ``os.environ``); ``ValueError`` naming a bad variable."""
    env = os.environ if env is None else env
    mode = _env(env, "LOWBIT_VLLM").lower()
    if mode in _OFF:
        mode = ""
    elif mode == "target":
        raise ValueError("LOWBIT_VLLM=target is not offered (the target's logits feed vLLM's sampler, see "
                         f"docs/vllm.md); LOWBIT_VLLM must be one of {', '.join(PARTS)} (or unset / 0 to disable)")
    elif mode not in PARTS:
        raise ValueError(f"LOWBIT_VLLM must be one of {', '.join(PARTS)} (or unset / 0 to disable); got {mode!r}")
    parts = PARTS.get(mode, ())

    kw = {}
    head_mode = _choice(env, "LOWBIT_VLLM_HEAD_MODE", ("certified", "fast"))
    if head_mode:
        kw["mode"] = head_mode
    bits = _choice(env, "LOWBIT_VLLM_BITS", ("auto", "native", "2", "4", "8"))
    if bits:
        kw["bits"] = bits if bits in ("auto", "native") else int(bits)
    group = _int(env, "LOWBIT_VLLM_GROUP_SIZE", 16, multiple=16)
    if group is not None:
        kw["group_size"] = group
    block = _int(env, "LOWBIT_VLLM_BLOCK", 16, 256, power_of_two=True)
    if block is not None:
        kw["block"] = block
    kcand = _int(env, "LOWBIT_VLLM_KCAND", 1, kw.get("block", 128))
    if kcand is not None:
        kw["kcand"] = kcand
    rerank = _int(env, "LOWBIT_VLLM_RERANK", 1)
    if rerank is not None:
        kw["rerank"] = rerank
    bound = _choice(env, "LOWBIT_VLLM_BOUND", ("det", "stat"))
    if bound:
        if bound == "stat" and kw.get("bits") == "native":
            raise ValueError("LOWBIT_VLLM_BOUND=stat needs an INTx coarse copy: set LOWBIT_VLLM_BITS to 2, 4 or 8")
        kw["bound"] = bound
    raw = _env(env, "LOWBIT_VLLM_SIGMA")
    if raw:
        try:
            sigma = float(raw)
        except ValueError:
            raise ValueError(f"LOWBIT_VLLM_SIGMA must be a number, got {raw!r}") from None
        if not (math.isfinite(sigma) and sigma > 0):
            raise ValueError(f"LOWBIT_VLLM_SIGMA must be positive and finite, got {raw!r}")
        kw["sigma"] = sigma

    eager_graphs = _choice(env, "LOWBIT_VLLM_EAGER_GRAPHS", ("0", "1"))
    if eager_graphs == "1":
        kw["eager_graphs"] = True

    warmup_m = _int(env, "LOWBIT_VLLM_WARMUP_M", 0)
    warmup_m = 64 if warmup_m is None else warmup_m

    stats_dir = _env(env, "LOWBIT_VLLM_STATS") or None
    if stats_dir is not None and os.path.exists(stats_dir) and not os.path.isdir(stats_dir):
        raise ValueError(f"LOWBIT_VLLM_STATS must name a directory, got the file {stats_dir!r}")
    return Settings(mode, "draft" in parts, "markov" in parts, kw, warmup_m, stats_dir)


_SETTINGS: Settings | None = None


def settings() -> Settings:
    """The process's settings (parsed on first use, then cached)."""
    global _SETTINGS
    if _SETTINGS is None:
        _SETTINGS = parse()
    return _SETTINGS


def reset() -> None:
    """Forget the cached settings (the next :func:`settings` re-reads the environment)."""
    global _SETTINGS
    _SETTINGS = None
