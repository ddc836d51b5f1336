"""The ``lowbit`` command line: ``lowbit --version``, ``lowbit info`` and the subcommands."""
from __future__ import annotations

import argparse
import sys

import lowbit


def _cmd_info(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from lowbit._backend import describe

    table = Table(title=f"lowbit {lowbit.__version__}", show_header=False)
    for key, value in describe().items():
        table.add_row(key, str(value))
    Console().print(table)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lowbit", description="Low-bit GPU kernels for LLM inference.")
    parser.add_argument("--version", action="version", version=f"lowbit {lowbit.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    p = sub.add_parser("info", help="torch / triton versions, device, and which paths will run")
    p.set_defaults(func=_cmd_info)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
