"""The tables of docs/serving.md made from the server itself: its routes (every protocol's of
npuctl.serve.protocols) and its limits (npuctl.serve.limits, which also makes the options).
python -m serve_tables FILE rewrites the marked tables in FILE (make docs-tables);
a test fails when the file is out of date."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from npuctl.serve import limits
from npuctl.serve.openapi import documented_path
from npuctl.serve.protocols import HTTP

START, END = "<!-- {} table: make docs-tables -->", "<!-- end of the {} table -->"


def routes_table() -> str:
    lines = ["| method | path | API | without the key |", "|---|---|---|---|"]
    for api in HTTP:
        for route in api.routes:
            public = f"with `--public {route.public}`" if route.public else "no"
            method = "any" if route.method == "*" else route.method
            lines.append(f"| {method} | `{documented_path(route)}` | {api.name} | {public} |")
    return "\n".join(lines) + "\n"


def render(text: str) -> str:
    for name, table in (("routes", routes_table()), ("limits", limits.table())):
        pattern = re.compile(
            re.escape(START.format(name)) + r"\n.*?" + re.escape(END.format(name)), re.S
        )
        if not pattern.search(text):
            raise SystemExit(f"no {name} table markers in the file: add {START.format(name)}")
        replacement = f"{START.format(name)}\n{table}{END.format(name)}"
        text = pattern.sub(lambda _: replacement, text)  # noqa: B023 - used at once
    return text


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m serve_tables FILE", file=sys.stderr)
        return 2
    path = Path(argv[0])
    path.write_text(render(path.read_text(encoding="utf-8")), encoding="utf-8")
    print(f"serve_tables: wrote {path}")
    return 0
