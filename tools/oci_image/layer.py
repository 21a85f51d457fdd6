"""A root file system as one image layer, the same bytes from the same tree: entries sorted,
owners numeric, times clamped to SOURCE_DATE_EPOCH, gzip without a name or a time."""

from __future__ import annotations

import gzip
import hashlib
import os
import stat
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

# A container runtime mounts its own /dev, /proc, /sys and /run, and /tmp is scratch: the
# layer keeps these folders, never what a build left in them.
EMPTIED = ("dev", "proc", "sys", "run", "tmp", "var/tmp")
LEVEL = 6


@dataclass(frozen=True)
class Layer:
    path: Path  # the compressed layer (tar.gz)
    digest: str  # sha256 of the compressed bytes: the blob's name
    diff_id: str  # sha256 of the tar itself: the image configuration names the layer so
    size: int  # compressed bytes
    tar_size: int  # uncompressed bytes: what the layer takes on a node's disk


class _Hashing:
    """A write-only stream that counts and hashes what passes through it."""

    def __init__(self, target: BinaryIO) -> None:
        self.target = target
        self.sha256 = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.sha256.update(data)
        self.size += len(data)
        return self.target.write(data)

    def flush(self) -> None:
        self.target.flush()


def _entries(root: Path) -> list[Path]:
    found: list[Path] = []
    for directory, folders, files in os.walk(root):
        here = Path(directory)
        relative = here.relative_to(root).as_posix()
        if relative in EMPTIED:
            folders.clear()
            continue
        folders.sort()
        found.extend(here / name for name in sorted([*folders, *files]))
    return sorted(found, key=lambda path: path.relative_to(root).as_posix())


def _info(archive: tarfile.TarFile, root: Path, path: Path, epoch: int) -> tarfile.TarInfo:
    info = archive.gettarinfo(str(path), arcname=path.relative_to(root).as_posix())
    info.mtime = min(int(info.mtime), epoch)
    info.uname = info.gname = ""
    return info


def write_layer(root: Path, target: Path, epoch: int) -> Layer:
    """Write ``root`` as a gzip-compressed tar to ``target``."""
    with target.open("wb") as raw:
        compressed = _Hashing(raw)
        # mtime=0 and no file name: gzip's header then carries nothing of this build. Level 6,
        # the default of Docker's and containerd's gzip: level 9 takes several times as long
        # for a layer hardly smaller.
        with gzip.GzipFile(
            filename="", mode="wb", fileobj=compressed, mtime=0, compresslevel=LEVEL
        ) as zipped:
            plain = _Hashing(zipped)  # type: ignore[arg-type]
            with tarfile.open(fileobj=plain, mode="w|", format=tarfile.PAX_FORMAT) as archive:
                for path in _entries(root):
                    if stat.S_ISSOCK(path.lstat().st_mode):
                        continue  # a socket left behind by a build is not content
                    info = _info(archive, root, path, epoch)
                    if info.isreg():
                        with path.open("rb") as content:
                            archive.addfile(info, content)
                    else:
                        archive.addfile(info)
    return Layer(
        target,
        "sha256:" + compressed.sha256.hexdigest(),
        "sha256:" + plain.sha256.hexdigest(),
        compressed.size,
        plain.size,
    )
