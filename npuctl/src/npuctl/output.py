"""One output contract: the same result objects rendered as text tables or as JSON."""

from __future__ import annotations

import json
from collections.abc import Sequence

import click


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(value) for value in row] for row in rows]
    widths = [max(len(line[i]) for line in [list(headers), *cells]) for i in range(len(headers))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += [
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in cells
    ]
    return "\n".join(lines)


def matrix(labels: Sequence[str], columns: Sequence[str], values: object) -> str:
    rows = [
        [label, *[f"{float(v):.3f}" for v in row]]
        for label, row in zip(labels, values, strict=True)
    ]  # type: ignore[call-overload]
    return table(["", *[_short(c) for c in columns]], rows)


def _short(text: str, width: int = 24) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def emit_json(document: object) -> None:
    click.echo(json.dumps(document, indent=2, ensure_ascii=False))
