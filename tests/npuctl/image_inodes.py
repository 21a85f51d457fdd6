"""Device nodes and owners in a board image: real ones when the tests run as root (mknod,
chown), else entries of the image's inode table, which npuctl's System reads the same way
(npuctl/system.py). NPUCTL_TEST_INODE_TABLE=1 uses the table as root too."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from npuctl.system import INODE_TABLE


def real_nodes() -> bool:
    return os.geteuid() == 0 and not os.environ.get("NPUCTL_TEST_INODE_TABLE")


def _table(root: Path) -> dict[str, dict[str, object]]:
    path = root / INODE_TABLE
    return json.loads(path.read_text()) if path.exists() else {}


def _save(root: Path, table: dict[str, dict[str, object]]) -> None:
    path = root / INODE_TABLE
    if table:
        path.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    elif path.exists():
        path.unlink()


def forget(root: Path, relative: str) -> None:
    """The path is no longer special (removed, or replaced by a plain file)."""
    table = _table(root)
    if table.pop("/" + relative, None) is not None:
        _save(root, table)


def char_device(root: Path, relative: str, mode: int, gid: int, major: int, minor: int) -> Path:
    """A character device node owned by root:gid with mode ``mode``."""
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        path.unlink()
    if real_nodes():
        os.mknod(path, mode | stat.S_IFCHR, os.makedev(major, minor))
        os.chown(path, 0, gid)
        path.chmod(mode)
        return path
    path.write_text("")  # what the NPU double opens; its type and owner come from the table
    table = _table(root)
    table["/" + relative] = {
        "type": "char",
        "mode": f"{mode:04o}",
        "uid": 0,
        "gid": gid,
        "rdev": f"{major}:{minor}",
    }
    _save(root, table)
    return path
