"""Writing files others read: complete or not at all, with the permissions of a normal file.

A file is written to a temporary name in its own directory and renamed over the target only
when complete, so a reader never sees half of it and Ctrl-C leaves nothing behind. The mode
is what ``open()`` would give (0666 less the umask), not mkstemp's 0600: after
``sudo npuctl models fetch`` every user must still read the lock file.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def normal_mode() -> int:
    return 0o666 & ~_umask()


def write_atomically(target: Path, write: Callable[[Path], None]) -> None:
    """Call ``write(temporary_path)``, then rename the result onto ``target``.

    The temporary file is removed on every path out (errors, Ctrl-C) except success."""
    handle, name = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    temporary = Path(name)
    try:
        os.fchmod(handle, normal_mode())
        os.close(handle)
        write(temporary)
        temporary.replace(target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def write_text_atomically(target: Path, text: str) -> None:
    def write(path: Path) -> None:
        path.write_text(text, encoding="utf-8")

    write_atomically(target, write)


def check_writable_file(target: Path, what: str) -> str | None:
    """Why ``target`` cannot be written (one sentence), or None. Missing folders may be
    created; checked before any work is done, so a bad output path fails at once, not after
    the NPU ran."""
    if target.is_dir():
        return f"{what} {target} is a directory"
    existing = target.parent
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"cannot write {what} {target}: {existing} is a file, not a folder"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"cannot write {what} {target}: the folder {existing} is not writable"
    if target.exists() and not os.access(target, os.W_OK):
        return f"cannot write {what} {target}: it exists and is not writable"
    return None


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
