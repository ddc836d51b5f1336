"""Print a device log of JSON lines compactly: each record without the named keys, other lines as
they are.

    python3 scripts/jsonl_summary.py LOG [KEY ...]
"""
from __future__ import annotations

import json
import sys


def main() -> int:
    path, drop = sys.argv[1], set(sys.argv[2:])
    with open(path) as f:
        for line in f:
            try:
                rec = json.loads(line)
            except ValueError:
                print(line, end="")
                continue
            print({k: v for k, v in rec.items() if k not in drop} if isinstance(rec, dict) else rec)
    return 0


if __name__ == "__main__":
    sys.exit(main())
