"""Where a kernel's warps stall, by region of its SASS: read the source page Nsight Compute exports
(``ncu -i REP --page source --csv --print-source sass > F.csv``) and print the share of the stall
samples per chunk of consecutive instructions (with the chunk's notable opcodes, so prologue, K
loop and epilogue are told apart), the instructions holding more than ``--top`` percent, and the
stall reasons overall.

    python scripts/ncu_stall_regions.py F.csv [--chunk 60] [--top 1.2]

``scripts/ncu_kernel.sh`` runs it on the page it exports.
"""
from __future__ import annotations

import argparse
import csv
import sys
from collections import Counter

#: opcodes worth naming in a chunk's summary (memory, barriers, tensor-core and scale math)
NOTABLE = ("WGMMA", "QGMMA", "IGMMA", "WARPGROUP", "SYNCS", "BAR", "UTMALDG", "LDG", "STG", "LDS", "STS", "LDSM",
           "ATOMG", "RED", "FENCE", "FFMA", "FMUL", "PRMT", "LOP3", "IMAD", "SHF")


def _opcode(src: str) -> str:
    parts = src.split()
    if parts and parts[0].startswith("@"):  # predicated instruction
        parts = parts[1:]
    return parts[0].split(".")[0] if parts else ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--chunk", type=int, default=60, help="instructions per region row")
    ap.add_argument("--top", type=float, default=1.2, help="list instructions above this percent of the samples")
    args = ap.parse_args()
    with open(args.csv, newline="") as f:
        rows = list(csv.reader(f))
    hdr_at = next(i for i, r in enumerate(rows) if "Address" in r and "Source" in r)
    hdr, data = rows[hdr_at], rows[hdr_at + 1:]
    i_src, i_samp = hdr.index("Source"), hdr.index("Warp Stall Sampling (All Samples)")
    i_exec = hdr.index("Instructions Executed")
    reasons = [i for i, h in enumerate(hdr) if h.startswith("stall_") and "Not Issued" not in h]

    def num(r, i):
        return float(r[i] or 0)

    total = sum(num(r, i_samp) for r in data) or 1.0
    print(f"{len(data)} instructions, {total:.0f} stall samples")
    print("\nregion   samples  executed  opcodes")
    for start in range(0, len(data), args.chunk):
        seg = data[start:start + args.chunk]
        ops = Counter(op for op in (_opcode(r[i_src]) for r in seg) if op in NOTABLE)
        print(f"{start:6d} {100 * sum(num(r, i_samp) for r in seg) / total:7.1f}% {sum(num(r, i_exec) for r in seg):9.0f}"
              f"  {dict(ops)}")
    print(f"\ninstructions above {args.top}% of the samples")
    for idx, r in enumerate(data):
        share = 100 * num(r, i_samp) / total
        if share > args.top:
            top2 = sorted(((num(r, i), hdr[i]) for i in reasons), reverse=True)[:2]
            print(f"{idx:6d} {share:5.1f}%  {r[i_src].strip()[:64]:64s} "
                  + " ".join(f"{name}={v:.0f}" for v, name in top2))
    overall = Counter()
    for r in data:
        for i in reasons:
            overall[hdr[i]] += num(r, i)
    print("\nreasons:", ", ".join(f"{k} {100 * v / total:.1f}%" for k, v in overall.most_common(8)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
