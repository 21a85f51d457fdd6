"""A docs page generated from a JSON report ('make matrix-tables', 'make emu-tables'): read,
check the schema, render, write atomically; bad input is one line and exit code 2."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

from .atomic import write_atomically


def generate(
    prog: str, argv: list[str], schema: int, producer: str, render: Callable[[dict, str], str]
) -> int:
    """``prog REPORT OUTPUT``: the page ``render(report, REPORT)`` at OUTPUT, or why not."""
    if len(argv) != 2:
        print(f"usage: python -m {prog} REPORT OUTPUT", file=sys.stderr)
        return 2
    source, output = Path(argv[0]), Path(argv[1])
    try:
        report = json.loads(source.read_text(encoding="utf-8"))
    except FileNotFoundError:
        print(f"{prog}: no {source}: run '{producer}' first", file=sys.stderr)
        return 2
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        print(f"{prog}: {source} is not a JSON report ({error})", file=sys.stderr)
        return 2
    found = report.get("schema") if isinstance(report, dict) else None
    if found != schema:
        print(
            f"{prog}: {source} has schema {found}, not {schema}: run '{producer}' again",
            file=sys.stderr,
        )
        return 2
    try:
        page = render(report, str(source))
    except (KeyError, TypeError, AttributeError, ValueError) as error:
        print(f"{prog}: {source} lacks a field ({error}): run '{producer}' again", file=sys.stderr)
        return 2
    write_atomically(output, page)
    print(output)
    return 0
