"""Shared by the timing scripts: each measured record printed as one JSON line as soon as it is
taken (a run cut short by a device time limit keeps what it printed), and the whole list written
as one JSON file at the end."""
from __future__ import annotations

import json


def emit_row(rows: list, rec: dict) -> None:
    """Append ``rec`` to ``rows`` and print it as one JSON line, flushed."""
    rows.append(rec)
    print(json.dumps(rec), flush=True)


def save_rows(path: str | None, rows: list) -> None:
    """Write ``rows`` as an indented JSON list to ``path`` (nothing when ``path`` is None)."""
    if path:
        with open(path, "w") as f:
            json.dump(rows, f, indent=1)
