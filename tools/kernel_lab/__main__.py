"""python -m kernel_lab matrix: the kernel matrix report (text table and JSON)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .matrix import Packages, format_table, report_ok, run_matrix, write_report
from .suites import PLANS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kernel-lab")
    commands = parser.add_subparsers(dest="command", required=True)
    matrix = commands.add_parser("matrix", help="run the kernel matrix")
    matrix.add_argument("--suites", default=",".join(PLANS), help="comma-separated suites")
    matrix.add_argument("--deb", type=Path, required=True)
    matrix.add_argument("--version", required=True)
    matrix.add_argument("--next-deb", type=Path, required=True)
    matrix.add_argument("--next-version", required=True)
    matrix.add_argument("--patched-tree", type=Path, required=True)
    matrix.add_argument("--workdir", type=Path, required=True)
    matrix.add_argument("--json", type=Path, required=True)
    matrix.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)

    names = [name for name in args.suites.split(",") if name]
    unknown = [name for name in names if name not in PLANS]
    if unknown:
        print(
            f"kernel-lab: unknown suite {', '.join(unknown)}; known: {', '.join(PLANS)}",
            file=sys.stderr,
        )
        return 2
    packages = Packages(
        args.deb.resolve(),
        args.version,
        args.next_deb.resolve(),
        args.next_version,
        args.patched_tree.resolve(),
    )
    report = run_matrix(
        [PLANS[name] for name in names], packages, args.workdir.resolve(), jobs=args.jobs
    )
    write_report(report, args.json)
    print(format_table(report))
    print(f"report: {args.json}")
    return 0 if report_ok(report) else 1


if __name__ == "__main__":
    sys.exit(main())
