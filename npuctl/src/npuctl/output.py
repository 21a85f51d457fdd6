"""One output contract: the same result objects rendered as text tables or as JSON."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Protocol

import click


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(value) for value in row] for row in rows]
    widths = [max(len(line[i]) for line in [list(headers), *cells]) for i in range(len(headers))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += [
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in cells
    ]
    return "\n".join(lines)


def matrix(labels: Sequence[str], columns: Sequence[str], values: Iterable[Iterable[float]]) -> str:
    rows = [
        [label, *[f"{float(v):.3f}" for v in row]]
        for label, row in zip(labels, values, strict=True)
    ]
    return table(["", *[_short(c) for c in columns]], rows)


def _short(text: str, width: int = 24) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def emit_json(document: object) -> None:
    """JSON on stdout, always valid UTF-8: a file name that is not valid UTF-8 is escaped."""
    text = json.dumps(document, indent=2, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(document, indent=2, ensure_ascii=True)
    click.echo(text)


class Progress(Protocol):
    def update(self, n_steps: int) -> None: ...


class _NoProgress:
    def update(self, n_steps: int) -> None:
        pass


@contextmanager
def progress_bar(length: int | None, label: str, *, shown: bool) -> Iterator[Progress]:
    """A progress bar on stderr when it is a terminal and ``shown``; nothing otherwise.
    (click < 8.2, Debian 12's 8.1.3 among them, has no ``hidden`` argument.)"""
    if not shown or not length or not sys.stderr.isatty():
        yield _NoProgress()
        return
    with click.progressbar(length=length, label=label, file=sys.stderr) as bar:
        yield bar
