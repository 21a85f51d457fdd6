"""The tables of docs/serving.md made from the server itself: its routes (.routes) and its
limits (the options of 'npuctl serve' that set them, with their defaults and help).
python -m serve_tables FILE rewrites the marked tables in FILE (make docs-tables);
a test fails when the file is out of date."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import click

from npuctl.serve import routes
from npuctl.serve.command import serve

# The options that bound what a client may cost, beside the Limits fields they set.
LIMIT_OPTIONS = (
    "queue_size", "max_inputs", "max_images", "max_body", "max_upload", "max_connections",
    "max_per_client", "head_timeout", "body_timeout", "deadline", "decodes", "max_detections",
)  # fmt: skip
START, END = "<!-- {} table: make docs-tables -->", "<!-- end of the {} table -->"


def limits_table() -> str:
    options = {param.name: param for param in serve.params if isinstance(param, click.Option)}
    lines = ["| flag | default | what it bounds |", "|---|---|---|"]
    for name in LIMIT_OPTIONS:
        option = options[name]
        text = " ".join((option.help or "").split())
        lines.append(f"| `{option.opts[0]}` | {option.default} | {text} |")
    return "\n".join(lines) + "\n"


def render(text: str) -> str:
    for name, table in (("routes", routes.listing()), ("limits", limits_table())):
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
