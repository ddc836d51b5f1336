"""Turn benchmark :class:`~lowbit.bench.registry.Result` rows into a table, JSON and a PNG.

Pure Python + matplotlib (Agg): no GPU needed, so it is tested on the CPU with made-up rows.

Derived columns per row (``ctx`` is the run's :class:`~lowbit.bench.registry.BenchContext`):

* ``gbps`` = bytes / µs / 1e3 and ``tflops`` = flops / µs / 1e6 (0 when not counted);
* ``floor_us`` = ``extra["floor_us"]`` when the benchmark gives one (a launch floor, or the bytes
  that must be read), else max(bytes / copy bandwidth, flops / peak), the peak being the FP8 one for
  rows whose ``extra["peak"] == "fp8"`` (or whose impl names fp8 / fp4 / scaled_mm when no peak is
  given) and bf16 otherwise; ``pct_floor`` = 100 * floor_us / us (100 % = at the roofline);
* ``speedup`` (lowbit rows only): for each baseline of the same (op, case),
  ``baseline µs / lowbit µs`` (> 1: lowbit is faster).
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Sequence

from lowbit.bench.registry import BenchContext, Result


def is_lowbit(impl: str) -> bool:
    return impl == "lowbit" or impl.startswith("lowbit")


def _peak(row: Result, ctx: BenchContext) -> float | None:
    peak = row.extra.get("peak") if isinstance(row.extra, dict) else None
    if peak == "fp8" or (peak is None and any(t in row.impl.lower() for t in ("fp8", "fp4", "scaled_mm"))):
        return ctx.fp8_tflops or ctx.bf16_tflops
    return ctx.bf16_tflops


def derive(rows: Sequence[Result], ctx: BenchContext) -> list[dict]:
    """One dict per row: the Result's fields plus ``gbps``, ``tflops``, ``floor_us``,
    ``pct_floor`` and (lowbit rows) ``speedup`` = {baseline impl: ratio}."""
    out = []
    for r in rows:
        us = float(r.us)
        ok = math.isfinite(us) and us > 0
        own = r.extra.get("floor_us") if isinstance(r.extra, dict) else None
        # a benchmark that knows its floor better (a launch floor, the coarse bytes only) says so
        floor = float(own) if isinstance(own, (int, float)) and own > 0 else r.floor_us(ctx, _peak(r, ctx))
        d = dataclasses.asdict(r)
        d.update(
            gbps=(r.bytes / (us * 1e3)) if ok and r.bytes else None,
            tflops=(r.flops / (us * 1e6)) if ok and r.flops else None,
            floor_us=floor if floor > 0 else None,
            pct_floor=(100.0 * floor / us) if ok and floor > 0 else None,
        )
        out.append(d)
    by_case: dict[tuple, list[dict]] = {}
    for d in out:
        by_case.setdefault((d["op"], d["case"]), []).append(d)
    for group in by_case.values():
        baselines = [d for d in group if not is_lowbit(d["impl"])]
        for d in group:
            if is_lowbit(d["impl"]):
                d["speedup"] = {b["impl"]: _ratio(b["us"], d["us"]) for b in baselines}
    return out


def _ratio(a: float, b: float) -> float | None:
    ok = all(isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in (a, b))
    return a / b if ok else None


def _fmt(v, spec: str) -> str:
    return "-" if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, spec)


def table_rows(derived: Sequence[dict]) -> tuple[list[str], list[list[str]]]:
    """Header and string cells of the terminal table (one line per row)."""
    header = ["op", "case", "impl", "µs", "GB/s", "TFLOP/s", "% of floor", "speedup vs baselines"]
    cells = []
    for d in derived:
        sp = d.get("speedup") or {}
        sp_text = ", ".join(f"{v:.2f}x {k}" for k, v in sp.items() if v is not None) if sp else ""
        err = d.get("extra", {}).get("error") if isinstance(d.get("extra"), dict) else None
        if err:
            sp_text = f"failed: {err[:60]}"
        cells.append([d["op"], d["case"], d["impl"], _fmt(d["us"], ".1f"), _fmt(d["gbps"], ".0f"),
                      _fmt(d["tflops"], ".1f"), _fmt(d["pct_floor"], ".0f"), sp_text])
    return header, cells


def print_table(derived: Sequence[dict], console=None, title: str = "lowbit bench") -> None:
    import sys

    from rich.console import Console
    from rich.table import Table

    # piped output keeps whole rows on one line instead of rich's 80-column default
    console = console or Console(width=None if sys.stdout.isatty() else 160)
    header, cells = table_rows(derived)
    table = Table(title=title)
    for i, h in enumerate(header):
        table.add_column(h, justify="right" if 3 <= i <= 6 else "left")
    previous = None
    for d, row in zip(derived, cells):
        if previous is not None and (d["op"], d["case"]) != previous:
            table.add_section()
        previous = (d["op"], d["case"])
        style = "bold" if is_lowbit(d["impl"]) else None
        table.add_row(*row, style=style)
    console.print(table)


def _finite(obj):
    """NaN / inf -> None, recursively (strict JSON has neither)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def write_json(derived: Sequence[dict], ctx: BenchContext, path: str, meta: dict | None = None) -> None:
    """Write the record whole or not at all (a temporary file renamed over ``path``): the bench
    command rewrites it after every benchmark, and a stop mid-write must leave the last one."""
    body = _finite({"context": dataclasses.asdict(ctx), "meta": meta or {}, "results": list(derived)})
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "w") as fh:
            json.dump(body, fh, indent=2, default=str, allow_nan=False)
            fh.write("\n")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def plot(derived: Sequence[dict], path: str, title: str = "lowbit bench") -> None:
    """One row of panels per op. Left: time per case (µs, log scale), one bar per impl, the
    byte/FLOP floor as a red dotted line. Right: the lowbit rows' speedup over each baseline of the
    same case (> 1: lowbit is faster), one group of bars per case and one colour per baseline, on a
    log axis when the speedups span more than 20x. The figure grows with the number of cases, so
    a 36-case op stays legible."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ops = list(dict.fromkeys(d["op"] for d in derived))
    if not ops:
        raise ValueError("no benchmark rows to plot")
    n_cases = [len({d["case"] for d in derived if d["op"] == op}) for op in ops]
    row_h = [max(3.8, 1.6 + 0.24 * n) for n in n_cases]
    fig, axes = plt.subplots(len(ops), 2, figsize=(max(15.0, 6.0 + 0.32 * max(n_cases)), sum(row_h)), squeeze=False,
                             gridspec_kw={"width_ratios": [3, 2], "height_ratios": row_h})
    for (ax, ax_sp), op in zip(axes, ops):
        rows = [d for d in derived if d["op"] == op]
        cases = list(dict.fromkeys(d["case"] for d in rows))
        impls = list(dict.fromkeys(d["impl"] for d in rows))
        width = 0.8 / max(len(impls), 1)
        lows = []
        for j, impl in enumerate(impls):
            xs, ys = [], []
            for i, case in enumerate(cases):
                hit = [d for d in rows if d["case"] == case and d["impl"] == impl]
                if hit and _ratio(hit[0]["us"], 1.0) is not None:
                    xs.append(i + (j - (len(impls) - 1) / 2) * width)
                    ys.append(hit[0]["us"])
            lows += ys
            ax.bar(xs, ys, width, label=impl, edgecolor="black" if is_lowbit(impl) else None)
        for i, case in enumerate(cases):
            floors = [d["floor_us"] for d in rows if d["case"] == case and d["floor_us"]]
            if floors:
                lows.append(min(floors))
                ax.hlines(min(floors), i - 0.45, i + 0.45, colors="red", linestyles=":", lw=1.5)
        ax.set_yscale("log")
        if lows:
            ax.set_ylim(bottom=min(lows) / 3)  # bars keep visible length on the log axis
        ax.set_xticks(range(len(cases)))
        ax.set_xticklabels(cases, rotation=45 if len(cases) > 12 else 20, ha="right", fontsize=8)
        ax.set_xlim(-0.6, len(cases) - 0.4)
        ax.set_ylabel("µs (log)")
        ax.set_title(f"{op}: time (red dotted: floor)")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=7, ncol=min(len(impls), 4))
        _plot_speedups(ax_sp, rows, cases)
    fig.suptitle(title)
    # leave the suptitle its own strip (about 0.5 inch) above the first row's panel titles
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.5 / fig.get_figheight()))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_speedups(ax, rows: Sequence[dict], cases: Sequence[str]) -> None:
    """Grouped horizontal bars: for each case (top to bottom) one bar per (lowbit impl, baseline)
    pair, coloured by the pair (legend); annotated with the ratio."""
    pairs: dict = {}
    for d in rows:
        for base, ratio in (d.get("speedup") or {}).items():
            if ratio is not None:
                pairs.setdefault(f"{d['impl']} vs {base}", {})[d["case"]] = ratio
    if not pairs:
        ax.text(0.5, 0.5, "no lowbit row with a baseline", ha="center", va="center", transform=ax.transAxes)
        ax.set_title("speedup of lowbit (> 1: faster)")
        return
    vals = [v for by_case in pairs.values() for v in by_case.values()]
    height = 0.8 / len(pairs)
    colours = ("tab:purple", "tab:olive", "tab:cyan", "tab:brown", "tab:pink", "tab:gray")  # not the time panel's
    for j, (name, by_case) in enumerate(pairs.items()):
        ys = [i + (j - (len(pairs) - 1) / 2) * height for i, c in enumerate(cases) if c in by_case]
        xs = [by_case[c] for c in cases if c in by_case]
        ax.barh(ys, xs, height, label=name, color=colours[j % len(colours)],
                edgecolor=["red" if v < 1 else "none" for v in xs])
        if len(cases) * len(pairs) <= 96:
            for y, v in zip(ys, xs):
                ax.annotate(f"{v:.0f}x" if v >= 100 else f"{v:.3g}x", (v, y), xytext=(2, 0),
                            textcoords="offset points", va="center", fontsize=6)
    ax.axvline(1.0, color="black", lw=1)
    if max(vals) / max(min(vals), 1e-9) > 20:
        ax.set_xscale("log")
    ax.set_yticks(range(len(cases)))
    ax.set_yticklabels(cases, fontsize=7)
    ax.set_ylim(len(cases) - 0.5, -0.5)  # first case on top
    ax.legend(fontsize=7, loc="best")
    ax.set_title("speedup of lowbit (> 1: faster; red edge: slower)")
    ax.grid(axis="x", alpha=0.3)
