"""The draft head's fast mode on the int8-wgmma coarse pass (``gluon_wgmma.py``) against the paths
it replaces and cuBLAS bf16, same run, on the H200.

    python3 scripts/bench_coarse_wgmma.py [--json $OUT/wgmma.json] [--ms 1,4,16,32,64] [--bits 2,4]
                                          [--real .realhead/smollm2_head.pt.xz] [--shapes 124160x5120]
                                          [--paths default,...] [--rounds 3]

Per head shape (random N(0, 0.02) bf16 rows, g64, block 128), bits and M, by CUDA-graph replay
(``lowbit.bench.timing.time_us``): ``DraftHead.argmax`` and ``topk(16)`` in fast mode and the
coarse pass alone, on the int8-wgmma pass (whole-row variant for INT2, also with its persistent
launch, and per group) and on the previous dispatch (``WGMMA_M_RANGE``
emptied: the mma.sync pass up to M = 16, the band kernels beyond); cuBLAS bf16 ``F.linear`` +
``argmax`` / ``topk``; the byte floor (the coarse copy's codes + scales + zeros at the measured
copy bandwidth) and the bytes the path's kernel reads (``read_floor_us``: codes + its words). With ``--real``: on SmolLM2-135M's head and 8192 real hidden states, fast-mode
argmax agreement with the exact fp32 argmax and recall@16 of ``topk(16)``, both paths.
"""
from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from head_bench import RecordLog, random_head  # noqa: E402


def _paths():
    """(name, settings) of the dispatches compared, settings the ``coarse_head`` / ``gluon_wgmma``
    module switches: the module defaults ("default"), the int8-wgmma pass at every M as its whole-row variant ("table", INT2 only,
    its warp-specialized kernel up to NB = 32 with the module's defaults; "table single": not
    persistent; "table persist": persistent; "table res": persistent with x resident in shared
    memory; "table x narrow": fed x in per-plane tiles of 32-byte rows, as before the twenty-fifth
    session) and per group ("wgmma": the single-partition loop; "wgmma ws": the warp-specialized
    kernel up to NB = 32, persistent; "wgmma ws single"; "wgmma ws res": x resident; "wgmma x
    narrow"; "table ws64" / "wgmma ws64": the warp-specialized kernel at NB = 64 too, capped at 84
    registers for two CTAs an SM -- its spills are in the epilogue, none in the stage loop,
    offline sm_90 compile), programs spanning two candidate blocks (``gluon_wgmma.SPAN``: "span" at
    every NB with the default kernel choice, "span64" at NB = 64 only, "span single" on the
    single-partition loop, "span ws" on the warp-specialized kernel, "span s3" with 3 ring slots; "one block": none), the candidate epilogue by successive
    max-and-mask rounds instead of sorted per-thread heads ("unsorted epilogue",
    ``gluon_wgmma.EMIT_SORTED`` off) or by sorted heads over float keys instead of their int32 bits
    ("float-key epilogue", ``EMIT_INT_KEYS`` off), the max-and-mask rounds masking before their stores
    ("mask first", ``EMIT_MASK_FIRST``), the whole-row pass persistent with three programs an SM
    ("table persist 3", ``PERSIST_CTAS_PER_SM``), the warp-specialized kernels' register caps before the
    twenty-eighth session ("two CTAs an SM": 64 / 80 at NB = 8 / 16 instead of 56, which holds
    three; "three CTAs short": 56 on short heads too, ``THREE_CTAS_MIN_STAGES`` = 0), the
    producer warp at 40 registers instead of 24 ("producer 40", ``PRODUCER_REGS``), the
    selection's second stage keyed by token / position ("token keys" / "position keys",
    ``select.TOKEN_KEYS``), the selection program at 4 / 16 warps ("select 4 warps" / "select 16
    warps", ``select.SELECT_WARPS``), the rerank's row in one masked load ("rerank one load",
    ``select.RERANK_MAX_BKK``), both launches after the pass without PDL ("tail no PDL",
    ``select.PDL``), the selection without its early trigger ("select no trigger",
    ``select.SELECT_TRIGGER``), the coarse pass triggering the selection launch after its last
    block at every NB / at none ("coarse late trigger" / "coarse early trigger",
    ``gluon_wgmma.LATE_TRIGGER_MIN_NB``), 1 / 2 / 4 picks a rerank program at every M ("rerank 1
    row" / "rerank 2 rows" / "rerank 4 rows", ``select.RERANK_ROWS`` / ``RERANK_ROWS_WIDE``), the
    x preparation's loads one after the other ("x prep serial", ``x_int8.X_PREFETCH`` off), the x
    preparation as a plain / programmatic dependent launch ("x prep plain launch" / "x prep pdl",
    ``x_int8.X_PDL``), the last row blocks split in 2 / 3 / 4 shares of their stages ("no split",
    "split P", "split P xU": ``gluon_wgmma.SPLIT_TAIL`` / ``SPLIT_TAIL_GROUP`` = (P, U), the blocks past a multiple of U
    x SMs), the per-group kernel's planes issued before the first is waited for at NB <= 32 / at
    none ("ws pipe" / "no ws pipe", ``gluon_wgmma.WS_PIPE_GROUP``), 5 / 6 ring slots at NB = 8 / 16
    ("ring 5" / "ring 6", ``gluon_wgmma._STAGES``), two CTAs an SM with 8 slots there ("two CTAs
    ring 8"), the per-group kernel's int32 -> fp32 of the plane sums by I2F / by the wgmmas started
    from zero point and magic offset at every NB ("i2f" / "magic start",
    ``gluon_wgmma.WS_MAGIC_GROUP_NB``), INT4's plane 1 shifted down before its wgmma / read in its
    high nibble at every NB ("no high nibble" / "high nibble", ``INT4_HIGH_NIBBLE_NB``; "shifted
    i2f": both as before the thirty-second session), the warp-specialized kernels' first ring of weight
    stages issued before / after their PDL wait ("early ring" / "no early ring", ``EARLY_RING``), their x
    boxes only as tall as M ("x rows box", ``X_ROWS_BOX``; "early ring x rows box": both), the per-group
    kernels fed the x sums negated ("neg xsum", ``NEG_XSUM``), a spanning program's two blocks on two
    consumer partitions ("split span", ``SPLIT_SPAN``; "split span 104": the second at 104 registers,
    ``SPLIT_SPAN_REGS``; "span split span": also spanning at every NB), a head of 4 / 2 candidates a
    block instead of the default 8 ("kcand 4" / "kcand 2": the head's ``kcand``, not a switch; "early ring x
    rows box kcand 4": with both launch options; "split span kcand 4": with split partitions) and none
    ("previous": the mma.sync pass up to M = 16, the band kernels beyond)."""
    from lowbit.ops.coarse_head.gluon_wgmma import MAXNREG_WS, MAXNREG_WS_GROUP, TABLE_BITS, WGMMA_BITS

    every = {b: (1, 64) for b in WGMMA_BITS}
    two = {8: 2, 16: 2, 32: 2, 64: 2}
    table = {"WGMMA_M_RANGE": every, "WGMMA_TABLE_BITS": TABLE_BITS}
    group = {"WGMMA_M_RANGE": every, "WGMMA_TABLE_BITS": (), "WS_GROUP_MAX_NB": 0}
    return (("default", {}), ("table", table), ("table single", {**table, "PERSIST_WS": False}),
            ("table persist", {**table, "PERSIST_WS": True, "X_RESIDENT": False}),
            ("table res", {**table, "PERSIST_WS": True, "X_RESIDENT": True}),
            ("table x narrow", {**table, "X_WIDE": False}), ("wgmma", group),
            ("wgmma ws", {**group, "WS_GROUP_MAX_NB": 32, "PERSIST_WS": True, "X_RESIDENT": False}),
            ("wgmma ws single", {**group, "WS_GROUP_MAX_NB": 32, "PERSIST_WS": False}),
            ("wgmma ws res", {**group, "WS_GROUP_MAX_NB": 32, "PERSIST_WS": True, "X_RESIDENT": True}),
            ("wgmma x narrow", {**group, "X_WIDE": False}),
            ("table ws64", {**table, "WS_TABLE_MAX_NB": 64, "MAXNREG_WS": {**MAXNREG_WS, 64: 84}}),
            ("wgmma ws64", {**group, "WS_GROUP_MAX_NB": 64, "MAXNREG_WS_GROUP": {**MAXNREG_WS_GROUP, 64: 84}}),
            ("span", {"SPAN": two}), ("span64", {"SPAN": {64: 2}}), ("one block", {"SPAN": {}}),
            ("unsorted epilogue", {"EMIT_SORTED": False}), ("float-key epilogue", {"EMIT_INT_KEYS": False}),
            ("mask first", {"EMIT_MASK_FIRST": True}),
            ("table persist 3", {**table, "PERSIST_WS": True, "X_RESIDENT": False, "PERSIST_CTAS_PER_SM": 3}),
            ("two CTAs an SM", {"THREE_CTAS_NB_TABLE": (), "THREE_CTAS_NB_GROUP": ()}),
            ("three CTAs short", {"THREE_CTAS_MIN_STAGES": 0}),
            ("producer 40", {"PRODUCER_REGS": 40}),
            ("token keys", {"TOKEN_KEYS": True}), ("position keys", {"TOKEN_KEYS": False}),
            ("select 4 warps", {"SELECT_WARPS": 4}), ("select 16 warps", {"SELECT_WARPS": 16}),
            ("rerank one load", {"RERANK_MAX_BKK": 8192}),
            ("token keys 16 warps", {"TOKEN_KEYS": True, "SELECT_WARPS": 16}),
            ("tail no PDL", {"SEL_PDL": False}), ("select no trigger", {"SELECT_TRIGGER": False}),
            ("coarse late trigger", {"LATE_TRIGGER_MIN_NB": 0}), ("coarse early trigger", {"LATE_TRIGGER_MIN_NB": 65}),
            ("rerank 2 rows", {"RERANK_ROWS": 2, "RERANK_ROWS_WIDE": 2}),
            ("rerank 4 rows", {"RERANK_ROWS": 4, "RERANK_ROWS_WIDE": 4}),
            ("rerank 1 row", {"RERANK_ROWS": 1, "RERANK_ROWS_WIDE": 1}), ("x prep serial", {"X_PREFETCH": False}),
            ("x prep plain launch", {"X_PDL": False}), ("x prep pdl", {"X_PDL": True}),
            ("no split", {"SPLIT_TAIL": (0, 1), "SPLIT_TAIL_GROUP": (0, 1)}),
            ("split 2", {"SPLIT_TAIL": (2, 1), "SPLIT_TAIL_GROUP": (2, 1)}),
            ("split 3", {"SPLIT_TAIL": (3, 1), "SPLIT_TAIL_GROUP": (3, 1)}),
            ("split 4", {"SPLIT_TAIL": (4, 1), "SPLIT_TAIL_GROUP": (4, 1)}),
            ("split 3 x2", {"SPLIT_TAIL": (3, 2), "SPLIT_TAIL_GROUP": (3, 2)}),
            ("split 4 x3", {"SPLIT_TAIL": (4, 3), "SPLIT_TAIL_GROUP": (4, 3)}),
            ("ws pipe", {"WS_PIPE_GROUP": (8, 16, 32)}), ("no ws pipe", {"WS_PIPE_GROUP": ()}),
            ("i2f", {"WS_MAGIC_GROUP_NB": ()}), ("magic start", {"WS_MAGIC_GROUP_NB": (8, 16, 32, 64)}),
            ("no high nibble", {"INT4_HIGH_NIBBLE_NB": ()}), ("high nibble", {"INT4_HIGH_NIBBLE_NB": (8, 16, 32, 64)}),
            ("shifted i2f", {"INT4_HIGH_NIBBLE_NB": (), "WS_MAGIC_GROUP_NB": ()}),
            ("ring 5", {"_STAGES": {8: 5, 16: 5, 32: 4, 64: 3}}), ("ring 6", {"_STAGES": {8: 6, 16: 6, 32: 4, 64: 3}}),
            ("two CTAs ring 8", {"THREE_CTAS_NB_TABLE": (), "THREE_CTAS_NB_GROUP": (),
                                 "_STAGES": {8: 8, 16: 8, 32: 4, 64: 3}}),
            ("span single", {"SPAN": two, "WS_TABLE_MAX_NB": 0, "WS_GROUP_MAX_NB": 0}),
            ("span ws", {"SPAN": two, "WS_TABLE_MAX_NB": 64, "WS_GROUP_MAX_NB": 64}),
            ("span s3", {"SPAN": two, "_STAGES_SPAN": {8: 3, 16: 3, 32: 3, 64: 3}}),
            ("early ring", {"EARLY_RING": True}), ("no early ring", {"EARLY_RING": False}),
            ("x rows box", {"X_ROWS_BOX": True}), ("early ring x rows box", {"EARLY_RING": True, "X_ROWS_BOX": True}),
            ("neg xsum", {"NEG_XSUM": True}),
            ("split span", {"SPLIT_SPAN": True}), ("split span 104", {"SPLIT_SPAN": True, "SPLIT_SPAN_REGS": 104}),
            ("span split span", {"SPAN": two, "SPLIT_SPAN": True}),
            ("kcand 4", {"KCAND": 4}), ("kcand 2", {"KCAND": 2}),
            ("early ring x rows box kcand 4", {"EARLY_RING": True, "X_ROWS_BOX": True, "KCAND": 4}),
            ("split span kcand 4", {"SPLIT_SPAN": True, "KCAND": 4}),
            ("previous", {"WGMMA_M_RANGE": {}, "WGMMA_TABLE_BITS": ()}))


_SWITCHES = (("ch", "WGMMA_M_RANGE"), ("ch", "WGMMA_TABLE_BITS"), ("g", "PERSIST_WS"), ("g", "X_WIDE"),
             ("g", "WS_GROUP_MAX_NB"), ("g", "X_RESIDENT"), ("g", "WS_TABLE_MAX_NB"), ("g", "MAXNREG_WS"),
             ("g", "MAXNREG_WS_GROUP"), ("g", "SPAN"), ("g", "_STAGES_SPAN"), ("g", "EMIT_SORTED"), ("g", "EMIT_INT_KEYS"), ("g", "EMIT_MASK_FIRST"), ("g", "PERSIST_CTAS_PER_SM"),
             ("g", "THREE_CTAS_MIN_STAGES"), ("g", "THREE_CTAS_NB_TABLE"), ("g", "THREE_CTAS_NB_GROUP"),
             ("g", "PRODUCER_REGS"), ("sel", "TOKEN_KEYS"), ("sel", "SELECT_WARPS"), ("sel", "RERANK_MAX_BKK"),
             ("sel", "SELECT_TRIGGER"), ("g", "LATE_TRIGGER_MIN_NB"), ("sel", "SEL_PDL"),
             ("sel", "RERANK_ROWS"), ("sel", "RERANK_ROWS_WIDE"), ("x", "X_PREFETCH"), ("x", "X_PDL"),
             ("g", "SPLIT_TAIL"), ("g", "SPLIT_TAIL_GROUP"), ("g", "WS_PIPE_GROUP"), ("g", "_STAGES"),
             ("g", "WS_MAGIC_GROUP_NB"), ("g", "INT4_HIGH_NIBBLE_NB"), ("g", "EARLY_RING"), ("g", "X_ROWS_BOX"),
             ("g", "NEG_XSUM"), ("g", "SPLIT_SPAN"), ("g", "SPLIT_SPAN_REGS"))


_ALIASES = {"SEL_PDL": "PDL"}  # switch name in a path -> the module attribute it sets


def _modules() -> dict:
    import lowbit.ops.coarse_head as ch
    from lowbit.ops.coarse_head import gluon_wgmma as g
    from lowbit.ops.coarse_head import select as sel
    from lowbit.ops.coarse_head import x_int8 as x

    return {"ch": ch, "g": g, "sel": sel, "x": x}


def _defaults() -> dict:
    """The switches' current values (restored after each path)."""
    mods = _modules()
    return {name: (dict(v) if isinstance(v, dict) else v)
            for m, name in _SWITCHES for v in (getattr(mods[m], _ALIASES.get(name, name)),)}


def _set_path(settings: dict, defaults: dict) -> None:
    """The switches at ``defaults`` overridden by ``settings``."""
    mods = _modules()
    for m, name in _SWITCHES:
        v = settings.get(name, defaults[name])
        if name == "WGMMA_M_RANGE":
            mods[m].WGMMA_M_RANGE.clear()
            mods[m].WGMMA_M_RANGE.update(v)
        else:
            setattr(mods[m], _ALIASES.get(name, name), v)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", default=None)
    ap.add_argument("--ms", default="1,4,8,16,32,64")
    ap.add_argument("--bits", default="2,4")
    ap.add_argument("--shapes", default="124160x5120")
    ap.add_argument("--real", default=None)
    ap.add_argument("--no-previous", action="store_true", help="time the wgmma paths only")
    ap.add_argument("--paths", default=None, help="comma-separated path names to time (default: all)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="time the paths this many times, the order reversed every other round, and report "
                         "medians (a fixed order biased later paths by ~1 us at M = 8 in one run)")
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F

    from lowbit import DraftHead
    from lowbit.bench.timing import copy_bandwidth_gbps, interleaved_medians, time_us
    from lowbit.ops.coarse_head import BOUND_NONE, coarse_head

    log = RecordLog()
    bw = copy_bandwidth_gbps()
    log({"copy_gbps": round(bw, 1)})
    paths = _paths()
    default = _defaults()
    if args.no_previous:
        paths = paths[:-1]
    if args.paths:
        paths = tuple(p for p in paths if p[0] in args.paths.split(","))
    ms = [int(v) for v in args.ms.split(",")]
    for shape in args.shapes.split(","):
        n, k = (int(v) for v in shape.split("x"))
        w = random_head(n, k)
        heads = {b: DraftHead(w, bits=b, mode="fast") for b in [int(v) for v in args.bits.split(",")]}
        # paths with their own candidates a block ("KCAND"): heads over the same weight (one packing)
        kheads = {(b, kc): DraftHead(w, bits=b, mode="fast", kcand=kc) for b in heads
                  for kc in {s["KCAND"] for _, s in paths if "KCAND" in s}}
        for m in ms:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            t_lin = time_us(lambda: F.linear(x, w).argmax(-1), graph=True)
            t_lintk = time_us(lambda: torch.topk(F.linear(x, w).float(), 16, dim=-1), graph=True)
            exact = (x.float() @ w.float().T).argmax(-1)
            log({"shape": shape, "M": m, "impl": "cuBLAS bf16", "argmax_us": round(t_lin, 1),
                 "topk16_us": round(t_lintk, 1)})
            for bits, h in heads.items():
                p = h._ensure_packed()
                floor = p.nbytes / (bw * 1e3)
                mine = {name: settings for name, settings in paths
                        if not settings.get("WGMMA_TABLE_BITS") or bits in settings["WGMMA_TABLE_BITS"]}

                def measure(name):
                    _set_path(mine[name], default)
                    hh = kheads[(bits, mine[name]["KCAND"])] if "KCAND" in mine[name] else h
                    ids = hh.argmax(x)
                    return {"argmax_us": time_us(lambda: hh.argmax(x), graph=True),
                            "topk16_us": time_us(lambda: hh.topk(x, 16), graph=True),
                            "coarse_us": time_us(lambda: coarse_head(x, p, block=128, kcand=hh.kcand,
                                                                     bound=BOUND_NONE), graph=True),
                            "agree_exact": (ids == exact).float().mean().item()}

                timed = interleaved_medians(list(mine), measure, args.rounds)
                _set_path({}, default)
                for name, rec in timed.items():
                    if "error" in rec:
                        log({"shape": shape, "M": m, "bits": bits, "impl": name, **rec})
                        continue
                    tb = mine[name].get("WGMMA_TABLE_BITS")
                    # what the path's kernel reads: the codes and its words (the whole-row variant's
                    # 2-byte group codes and row units, or the per-group scales and zeros)
                    extra = sum(t.numel() * t.element_size() for t in
                                (p.wgmma_table() if bits in (default["WGMMA_TABLE_BITS"] if tb is None else tb)
                                 else (p.wgmma_words(),)))
                    read_floor = (p.fmt.packed.numel() + extra) / (bw * 1e3)
                    ta, tt, tc = rec["argmax_us"], rec["topk16_us"], rec["coarse_us"]
                    log({"shape": shape, "M": m, "bits": bits, "impl": name, "argmax_us": round(ta, 1),
                         "topk16_us": round(tt, 1), "coarse_us": round(tc, 1), "floor_us": round(floor, 1),
                         "read_floor_us": round(read_floor, 1), "argmax_x_floor": round(ta / floor, 2),
                         "coarse_x_floor": round(tc / floor, 2), "argmax_vs_cublas": round(t_lin / ta, 2),
                         "topk_vs_argmax": round(tt / ta, 2), "agree_exact": round(rec["agree_exact"], 4),
                         "rounds": args.rounds})
        kheads.clear()  # (not del: measure() reads it)
        del heads, w
        torch.cuda.empty_cache()

    if args.real:
        from real_head_data import load

        blob = load(args.real)
        w = blob["weight"].cuda()
        hidden = blob["hidden"].cuda()
        exact = (hidden.float() @ w.float().T)
        top1 = exact.argmax(-1)
        top16 = exact.topk(16, dim=-1).indices
        log({"model": blob.get("model"), "weight": list(w.shape), "positions": hidden.shape[0]})
        for bits in [int(v) for v in args.bits.split(",")]:
            for kc, r in ((8, 64), (8, 32)):
                h = DraftHead(w, bits=bits, mode="fast", kcand=kc, rerank=r)
                for m in (16, 64):
                    t_lin = time_us(lambda: F.linear(hidden[:m], w).argmax(-1), graph=True)
                    for name, settings in paths:
                        tb = settings.get("WGMMA_TABLE_BITS")
                        if tb and bits not in tb:
                            continue
                        _set_path(settings, default)
                        agree = rec = 0
                        for s0 in range(0, hidden.shape[0] - m + 1, m):
                            xb = hidden[s0:s0 + m]
                            agree += (h.argmax(xb) == top1[s0:s0 + m]).sum().item()
                            idx = h.topk(xb, 16)[1]
                            rec += (idx[:, :, None] == top16[s0:s0 + m, None, :]).any(-1).sum().item()
                        npos = (hidden.shape[0] // m) * m
                        ta = time_us(lambda: h.argmax(hidden[:m]), graph=True)
                        log({"real": True, "bits": bits, "kcand": kc, "rerank": r, "M": m, "impl": name,
                             "argmax_agree": round(agree / npos, 5), "recall16": round(rec / (16 * npos), 5),
                             "argmax_us": round(ta, 1), "cublas_argmax_us": round(t_lin, 1),
                             "vs_cublas": round(t_lin / ta, 2)})
                    _set_path({}, default)
    log.save(args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
