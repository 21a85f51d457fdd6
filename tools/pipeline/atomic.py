"""Writing files and folders so that a failure leaves nothing half-written."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def write_atomically(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        Path(temporary).chmod(mode)
        Path(temporary).replace(path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


@contextmanager
def replaced_directory(destination: Path) -> Iterator[Path]:
    """A path (not yet created) to build a folder at; the folder replaces ``destination``
    only when the block succeeds, and is removed otherwise."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{destination.name}-", dir=destination.parent))
    try:
        tree = staging / destination.name
        yield tree
        if destination.exists():
            shutil.rmtree(destination)
        tree.rename(destination)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
