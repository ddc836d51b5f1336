"""Tune the launch configs of ``act_quant`` and ``fp4_act_quant`` (``ACT_QUANT_CONFIG`` /
``FP4_ACT_QUANT_CONFIG`` in ``triton.py``) on a GPU: ``lowbit tune act_quant``.

For x = randn [8192, 7168] bf16 (``--shape``), every (elements per program, warps) candidate runs
for each scale format -- act_quant: fp32 and power-of-two (UE8M0) scales; fp4_act_quant: UE8M0
per 32 and E4M3 per 16 -- and must equal the reference computed on the CPU bit for bit (else
INVALID); the valid ones are timed with ``lowbit.bench.gemm.cold_us`` (L2 flushed), next to the
device's copy bandwidth (``copy_bandwidth_gbps``) over the bytes moved (x read, codes and scales
written). The best config is the one with the lowest worst-case time over the formats; it is
printed as the table line to paste.
"""
from __future__ import annotations

import argparse
import itertools

from lowbit.ops._tuning import Log, cuda_missing, dump_json

__all__ = ["main"]

ELEMS = (1024, 2048, 4096, 8192, 16384, 32768)
WARPS = (1, 2, 4, 8, 16)
QUICK = ((2048, 2), (4096, 4), (8192, 8))
FP8_FORMATS = ((None, "fp32 scales"), ("ue8m0", "ue8m0 scales"))
FP4_FORMATS = (("ue8m0", 32), ("e4m3", 16))


def candidates(quick: bool) -> list[tuple[int, int]]:
    """(elements, warps), at most 256 elements a thread and at least 32."""
    if quick:
        return list(QUICK)
    return [(e, w) for e, w in itertools.product(ELEMS, WARPS) if 32 <= e // (32 * w) <= 256]


def _bits(t):
    import torch

    return t.view(torch.uint8) if t.element_size() == 1 else t.view(torch.int32)


def _same(got, want) -> bool:
    import torch

    return all(torch.equal(_bits(g.cpu()), _bits(w)) for g, w in zip(got, want))


def _sweep(log, x, cands, op, formats, run, reference, nbytes, copy_gbps) -> dict:
    """{config: {format: us or None}} for one op; prints a row per (config, format)."""
    from lowbit.bench.gemm import cold_us

    table = {}
    refs = {fmt: reference(x.cpu(), fmt) for fmt in formats}
    for cfg in cands:
        for fmt in formats:
            try:
                ok = _same(run(x, fmt, cfg), refs[fmt])
                us = cold_us(lambda: run(x, fmt, cfg)) if ok else None
                status = "ok" if ok else "INVALID"
            except Exception as e:  # noqa: BLE001 - a config that does not compile is a result
                us, status = None, f"ERROR {type(e).__name__}: {str(e)[:120]}"
            table.setdefault(cfg, {})[str(fmt)] = us
            gbps = nbytes(fmt) / us / 1e3 if us else float("nan")
            log(f"{op:14s} {cfg[0]:6d}/w{cfg[1]:<3d} {str(fmt):16s} "
                + (f"{us:8.1f} us {gbps:6.0f} GB/s {100 * gbps / copy_gbps:5.1f}% of copy" if us else status))
    return table


def _best(table: dict):
    """The config with the lowest worst-case time over the formats (valid in all of them)."""
    full = {c: max(v.values()) for c, v in table.items() if all(t is not None for t in v.values())}
    return min(full, key=full.get) if full else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="lowbit tune act_quant", description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", type=int, nargs=2, default=(8192, 7168), metavar=("ROWS", "K"))
    ap.add_argument("--quick", action="store_true", help="three candidates")
    ap.add_argument("--op", choices=("act_quant", "fp4_act_quant", "both"), default="both")
    ap.add_argument("--json", default=None, help="write every timing here")
    args = ap.parse_args(argv)
    if cuda_missing("lowbit tune act_quant"):
        return 2
    import torch

    from lowbit.bench.timing import copy_bandwidth_gbps
    from lowbit.ops.act_quant import reference as ref
    from lowbit.ops.act_quant import triton as aq

    log = Log()
    x = torch.randn(*args.shape, device="cuda", generator=torch.Generator("cuda").manual_seed(0)).to(torch.bfloat16)
    numel = x.numel()
    copy_gbps = copy_bandwidth_gbps()
    log(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; x {tuple(x.shape)} bf16; copy {copy_gbps:.0f} GB/s")
    cands = candidates(args.quick)
    out = {"shape": list(args.shape), "device": torch.cuda.get_device_name(), "copy_gbps": copy_gbps}
    if args.op in ("act_quant", "both"):
        table = _sweep(
            log, x, cands, "act_quant", [f for f, _ in FP8_FORMATS],
            lambda t, fmt, cfg: aq.act_quant(t, 128, fmt == "ue8m0", False, config=cfg),
            lambda t, fmt: ref.act_quant_ref(t, 128, fmt, False),
            lambda fmt: numel * 2 + numel + numel // 128 * 4, copy_gbps)
        best = _best(table)
        out["act_quant"] = {f"{c[0]}/{c[1]}": v for c, v in table.items()}
        if best:
            print(f"ACT_QUANT_CONFIG = ActQuantConfig{best}  # worst case {max(table[best].values()):.1f} us "
                  f"(table: {tuple(aq.ACT_QUANT_CONFIG)})")
    if args.op in ("fp4_act_quant", "both"):
        table = _sweep(
            log, x, cands, "fp4_act_quant", list(FP4_FORMATS),
            lambda t, fmt, cfg: aq.fp4_act_quant(t, fmt[1], fmt[0] == "e4m3", config=cfg),
            lambda t, fmt: ref.fp4_act_quant_ref(t, fmt[1], fmt[0]),
            lambda fmt: numel * 2 + numel // 2 + numel // fmt[1], copy_gbps)
        best = _best(table)
        out["fp4_act_quant"] = {f"{c[0]}/{c[1]}": v for c, v in table.items()}
        if best:
            print(f"FP4_ACT_QUANT_CONFIG = Fp4ActQuantConfig{best}  # worst case {max(table[best].values()):.1f} us "
                  f"(table: {tuple(aq.FP4_ACT_QUANT_CONFIG)})")
    if args.json:
        dump_json(args.json, out)
        log("wrote", args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
