"""How often a low-bit draft head gives the exact head's answer, on real hidden states.

:func:`evaluate_head` takes the LM head's inputs ``hidden [P, K]`` (collected from a real model,
see :func:`lowbit.models.hf.collect_hidden`), its weight ``[N, K]`` and a list of configurations,
and reports for each:

* ``agreement`` — fraction of positions where ``DraftHead.argmax`` equals the exact argmax
  (``argmax(hidden @ W^T)`` in fp32, lower index first among ties). Equal to recall@1.
* ``recall@k`` (k = 1, 4, 16 by default) — mean over positions of
  ``|draft top-k indices ∩ exact top-k indices| / k`` (NaN when the head cannot return k, e.g. a
  fast head with ``kcand=1`` over fewer than k blocks).
* ``mean_set_size`` / ``max_set_size`` / ``fallback_rate`` — certified mode only (from the
  head's ``stats`` during the argmax pass): how many tokens were rescored exactly per position,
  and the fraction of positions scored in full because a block may hide a member of the set
  (``wide_rate``: the set outgrew ``rerank`` but every member was among the candidates, so all
  were rescored; ``rescan_rate``: certified with one or two blocks rescored whole). The same from
  each ``topk(k)`` pass, k > 1: ``mean_set_size@k``, ``max_set_size@k``, ``fallback_rate@k``,
  ``wide_rate@k``, ``rescan_rate@k``.
* ``bytes`` — what one coarse pass streams (packed codes + scales + zeros), next to
  ``bf16_bytes = N * K * 2``, and ``bits_per_weight = 8 * bytes / (N * K)``.

A configuration is a dict with keys ``bits`` (2/4/8), ``group_size``, ``mode`` ("fast" or
"certified"), ``kcand``, ``rerank`` and optionally ``bound`` ("det"/"stat"), ``sigma`` and ``block``;
:func:`parse_config` reads the CLI's compact form ``fast:int4:g64:k8:r32``.
"""
from __future__ import annotations

import math
import re
import time
from typing import Callable, Iterable, Sequence

import torch

from lowbit._validate import check_tensor, require

KS = (1, 4, 16)

#: The default sweep: coarse-only, the fast mode at 2/4/8 bits, and the certified mode.
DEFAULT_CONFIGS = (
    "fast:int2:g64:k1:r1",
    "fast:int2:g64:k8:r64",
    "fast:int4:g64:k1:r1",
    "fast:int4:g64:k8:r32",
    "fast:int4:g32:k8:r32",
    "fast:int8:g64:k4:r16",
    "certified:int8:g64",
    "certified:int4:g64:k8:r256",
    "certified:int4:g32:k8:r256:stat4",
)

_KEYS = {"bits", "group_size", "mode", "kcand", "rerank", "bound", "sigma", "block"}


def parse_config(text: str) -> dict:
    """``"fast:int4:g64:k8:r32"`` -> ``{"mode": "fast", "bits": 4, "group_size": 64, "kcand": 8,
    "rerank": 32}``. Fields after the mode, in any order: ``int2|int4|int8``, ``gN`` (group size),
    ``kN`` (candidates per block), ``rN`` (rerank / certified cap), ``bN`` (tokens per block),
    ``det`` or ``statS`` (bound; S = sigma). Missing fields take :class:`~lowbit.nn.DraftHead`'s defaults. ValueError on junk."""
    parts = [p for p in text.strip().split(":") if p]
    require(len(parts) >= 1 and parts[0] in ("fast", "certified"),
            f"config {text!r}: must start with 'fast' or 'certified', e.g. 'fast:int4:g64:k8:r32'")
    cfg: dict = {"mode": parts[0]}
    for p in parts[1:]:
        m = re.fullmatch(r"(int|g|k|r|b|stat)(\d+(?:\.\d+)?)|det", p)
        require(m is not None, f"config {text!r}: cannot read field {p!r} (expected intB, gN, kN, rN, bN, det or statS)")
        if p == "det":
            cfg["bound"] = "det"
            continue
        key, val = m.group(1), m.group(2)
        if key == "stat":
            cfg["bound"], cfg["sigma"] = "stat", float(val)
            continue
        require("." not in val, f"config {text!r}: {p!r} needs an integer")
        name = {"int": "bits", "g": "group_size", "k": "kcand", "r": "rerank", "b": "block"}[key]
        cfg[name] = int(val)
    if "bits" in cfg:
        require(cfg["bits"] in (2, 4, 8), f"config {text!r}: bits must be 2, 4 or 8, got {cfg['bits']}")
    return cfg


def config_label(cfg: dict) -> str:
    """Compact label, the inverse of :func:`parse_config` for the fields present."""
    parts = [cfg.get("mode", "certified")]
    if cfg.get("bits") is not None:
        parts.append(f"int{cfg['bits']}")
    for key, tag in (("group_size", "g"), ("kcand", "k"), ("rerank", "r"), ("block", "b")):
        if cfg.get(key) is not None:
            parts.append(f"{tag}{cfg[key]}")
    if cfg.get("bound") == "stat":
        parts.append(f"stat{cfg.get('sigma', 4.0):g}")
    return ":".join(parts)


def exact_topk(hidden: torch.Tensor, weight: torch.Tensor, k: int, batch: int = 1024) -> torch.Tensor:
    """int64 [P, k]: indices of the exact fp32 top-k of ``hidden @ weight^T`` (lower index first
    among equal values, like DraftHead)."""
    w = weight.float()
    out = []
    for i in range(0, hidden.shape[0], batch):
        logits = hidden[i: i + batch].float() @ w.t()
        vals, idx = torch.topk(logits, k, dim=-1)
        # order equal values by index, the lower first: sort by index, then stably by value
        order = torch.argsort(idx, dim=-1)
        vals, idx = vals.gather(-1, order), idx.gather(-1, order)
        order = torch.sort(vals, dim=-1, descending=True, stable=True).indices
        out.append(idx.gather(-1, order))
    return torch.cat(out)


def _can_topk(head, k: int) -> bool:
    return k <= getattr(head, "max_k", k)  # a DraftHead's limit; other heads (exact, coarse-only) take any k


def _make_head(weight: torch.Tensor, cfg: dict):
    from lowbit.nn.draft_head import DraftHead

    return DraftHead(weight, **cfg)


def evaluate_head(hidden: torch.Tensor, weight: torch.Tensor, configs: Iterable[dict | str], *,
                  ks: Sequence[int] = KS, batch: int = 256,
                  head_factory: Callable[[torch.Tensor, dict], object] | None = None,
                  on_config: Callable[[int, dict], None] | None = None) -> list[dict]:
    """Accuracy of each draft-head configuration against the exact head (see module docstring).

    hidden: float ``[P, K]`` (any device; the head runs on ``weight``'s device). weight: float
    ``[N, K]``. configs: dicts (or strings for :func:`parse_config`). ``head_factory(weight, cfg)``
    builds a head (default :class:`lowbit.nn.DraftHead`); it needs ``argmax``, ``topk``, ``stats``
    (``mean_set_size``, ``max_set_size``, ``fallback_rate``), ``reset_stats`` and ``packing.nbytes``
    (or ``nbytes``). Returns one dict a config: its fields plus ``label``, ``positions``,
    ``agreement``, ``recall@k``, ``mean_set_size``, ``max_set_size``, ``fallback_rate``, ``bytes``,
    ``bf16_bytes``, ``bits_per_weight``, ``seconds``. Nothing is mutated.
    """
    check_tensor("hidden", hidden, ndim=2)
    check_tensor("weight", weight, ndim=2)
    require(hidden.is_floating_point() and weight.is_floating_point(),
            f"hidden and weight must be floating point, got {hidden.dtype} and {weight.dtype}")
    require(hidden.shape[1] == weight.shape[1],
            f"hidden is {tuple(hidden.shape)} but weight is {tuple(weight.shape)}: the K dims differ")
    require(hidden.shape[0] > 0, "hidden has no rows")
    ks = sorted(set(int(k) for k in ks))
    require(all(1 <= k <= weight.shape[0] for k in ks), f"every k must be in [1, N={weight.shape[0]}], got {ks}")
    configs = [parse_config(c) if isinstance(c, str) else dict(c) for c in configs]
    for c in configs:
        unknown = set(c) - _KEYS
        require(not unknown, f"config {c} has unknown keys {sorted(unknown)}; allowed {sorted(_KEYS)}")
    factory = head_factory or _make_head
    n, k_dim = weight.shape
    device = weight.device
    kmax = max(ks)
    # the reference sees exactly the x the head sees (cast to the weight's dtype), in fp32
    ref = exact_topk(hidden.to(device=device, dtype=weight.dtype), weight, kmax)  # [P, kmax]
    rows = []
    for ci, cfg in enumerate(configs):
        head = factory(weight, cfg)
        t0 = time.perf_counter()
        agree = 0
        hits = {k: 0.0 for k in ks}
        stats_k: dict[int, dict] = {}
        if hasattr(head, "reset_stats"):
            head.reset_stats()
        for i in range(0, hidden.shape[0], batch):
            x = hidden[i: i + batch].to(device=device, dtype=weight.dtype)
            agree += int((head.argmax(x).reshape(-1) == ref[i: i + batch, 0]).sum())
        stats = dict(getattr(head, "stats", {}) or {})
        for k in ks:
            if k == 1:  # recall@1 is the argmax agreement: no second pass
                hits[1] = float(agree)
                continue
            if not _can_topk(head, k):
                hits[k] = math.nan  # e.g. a fast head emitting fewer than k candidates
                continue
            if hasattr(head, "reset_stats"):
                head.reset_stats()
            for i in range(0, hidden.shape[0], batch):
                x = hidden[i: i + batch].to(device=device, dtype=weight.dtype)
                got = head.topk(x, k)[1]
                want = ref[i: i + batch, :k]
                # |got ∩ want| per row: indices are distinct within a row
                hits[k] += float((got.unsqueeze(-1) == want.unsqueeze(-2)).any(-1).sum()) / k
            stats_k[k] = dict(getattr(head, "stats", {}) or {})
        p = hidden.shape[0]
        packing = getattr(head, "packing", None)
        nbytes = int(getattr(packing, "nbytes", None) or getattr(head, "nbytes", 0) or 0)
        certified = cfg.get("mode", "certified") == "certified"
        row = {
            "label": config_label(cfg),
            **cfg,
            "positions": p,
            "agreement": agree / p,
            **{f"recall@{k}": hits[k] / p for k in ks},
            "mean_set_size": float(stats.get("mean_set_size", math.nan)) if certified else math.nan,
            "max_set_size": int(stats.get("max_set_size", 0)) if certified else None,
            "fallback_rate": float(stats.get("fallback_rate", 0.0)) if certified else 0.0,
            # rows whose set outgrew the cap but lay among the candidates (all candidates rescored)
            "wide_rate": _rate(stats, "wide", p) if certified else None,
            # rows certified with one or two blocks rescored whole (no whole-row pass)
            "rescan_rate": _rate(stats, "rescans", p) if certified else None,
            **(_per_k(stats_k, p) if certified else {}),
            "bytes": nbytes,
            "bf16_bytes": n * k_dim * 2,
            "bits_per_weight": 8 * nbytes / (n * k_dim) if nbytes else math.nan,
            "seconds": time.perf_counter() - t0,
        }
        rows.append(row)
        if on_config is not None:
            on_config(ci, row)
    return rows


def _rate(stats: dict, key: str, p: int) -> float | None:
    return stats[key] / max(int(stats.get("rows", 0)) or p, 1) if key in stats else None


def _per_k(stats_k: dict[int, dict], p: int) -> dict:
    """A certified head's statistics of each ``topk(k)`` pass, keyed ``<name>@k``."""
    out = {}
    for k, st in stats_k.items():
        out[f"mean_set_size@{k}"] = float(st.get("mean_set_size", math.nan))
        out[f"max_set_size@{k}"] = int(st.get("max_set_size", 0))
        out[f"fallback_rate@{k}"] = float(st.get("fallback_rate", 0.0))
        out[f"wide_rate@{k}"] = _rate(st, "wide", p)
        out[f"rescan_rate@{k}"] = _rate(st, "rescans", p)
    return out


def jsonable(rows: Sequence[dict]) -> list[dict]:
    """The rows with NaN replaced by None (strict JSON has no NaN)."""
    return [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()} for r in rows]


def write_csv(rows: Sequence[dict], path: str) -> None:
    import csv

    keys: list[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=keys)
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in keys})


def plot(rows: Sequence[dict], path: str, title: str = "DraftHead accuracy vs the exact head") -> None:
    """Two panels: agreement and recall@k per configuration; agreement vs coarse bytes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [r["label"] for r in rows]
    recall_keys = sorted((k for k in rows[0] if k.startswith("recall@")), key=lambda s: int(s.split("@")[1])) if rows else []
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(max(10, 1.1 * len(rows) + 6), 5), gridspec_kw={"width_ratios": [2, 1]})
    xs = list(range(len(rows)))
    series = [("argmax agreement", "agreement")] + [(k, k) for k in recall_keys if k != "recall@1"]
    width = 0.8 / len(series)
    for j, (name, key) in enumerate(series):
        vals = [100 * r[key] if r[key] == r[key] else 0.0 for r in rows]  # NaN (not available) -> no bar
        ax1.bar([x + (j - (len(series) - 1) / 2) * width for x in xs], vals, width, label=name)
    ax1.set_xticks(list(xs))
    ax1.set_xticklabels(labels, rotation=35, ha="right", fontsize=8)
    ax1.set_ylabel("% of positions")
    ax1.set_ylim(0, 105)
    ax1.grid(alpha=0.3)
    ax1.legend(loc="lower right", fontsize=8)
    ax1.set_title("agreement / recall@k per configuration")
    mb = [r["bytes"] / 1e6 for r in rows]
    ax2.scatter(mb, [100 * r["agreement"] for r in rows], c=["tab:green" if r.get("mode") == "certified" else "tab:blue" for r in rows])
    stacked: dict[tuple, int] = {}
    for x, r in zip(mb, rows):
        spot = (round(x), round(100 * r["agreement"]))  # labels of coinciding points are stacked
        i = stacked.get(spot, 0)
        stacked[spot] = i + 1
        ax2.annotate(r["label"], (x, 100 * r["agreement"]), fontsize=6, xytext=(4, -4 - 8 * i), textcoords="offset points")
    if rows:
        ax2.axvline(rows[0]["bf16_bytes"] / 1e6, color="gray", ls=":", label="bf16 head")
        ax2.legend(fontsize=8)
    ax2.set_xlabel("coarse bytes per pass (MB)")
    ax2.set_ylabel("argmax agreement (%)")
    ax2.set_title("agreement vs bytes (green: certified)")
    ax2.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
