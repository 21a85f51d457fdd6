"""The model directory: files, the lock file of verified checksums, and file checks."""

from __future__ import annotations

import datetime as dt
import json
import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import ExitCode, ModelError
from ..files import sha256_of, write_text_atomically
from .manifest import Entry

LOCK_NAME = "models.lock.json"
SYSTEM_DIR = Path("/var/lib/npuctl/models")
LFS_POINTER_PREFIX = b"version https://git-lfs"


def default_models_dir() -> Path:
    explicit = os.environ.get("NPUCTL_MODELS")
    if explicit:
        return Path(explicit)
    if SYSTEM_DIR.is_dir():
        return SYSTEM_DIR
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home) / "npuctl" / "models"


def ensure_writable_dir(directory: Path) -> None:
    """The model directory exists and this user may write to it; else one line with the fix."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ModelError(_unwritable(directory, error.strerror or str(error))) from error
    if not directory.is_dir():
        raise ModelError(f"the model directory {directory} is not a folder: pass --models-dir")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise ModelError(_unwritable(directory, "permission denied"))


def _unwritable(directory: Path, reason: str) -> str:
    return (
        f"cannot write to the model directory {directory} ({reason}): run the command "
        f"with sudo, or use your own with --models-dir ~/.local/share/npuctl/models"
    )


def check_model_file(path: Path) -> None:
    """What can be known about a model file without handing it to libnoe (which segfaults
    on a missing, unreadable or malformed file)."""
    if not path.exists():
        raise ModelError(
            f"model file {path} does not exist: run 'npuctl models fetch' or "
            "pass an existing --model"
        )
    if not path.is_file():
        raise ModelError(f"model file {path} is not a regular file")
    try:
        with path.open("rb") as stream:
            head = stream.read(256)
    except OSError as error:
        raise ModelError(f"cannot read model file {path}: {error.strerror}") from error
    if not head:
        raise ModelError(f"model file {path} is empty: download it again ('npuctl models fetch')")
    if head.startswith(LFS_POINTER_PREFIX):
        raise ModelError(
            f"{path} is a Git LFS pointer ({path.stat().st_size} bytes), not the "
            "model: download it with 'npuctl models fetch'"
        )


@dataclass
class Lock:
    """sha256 of the first verified download of each unpinned file."""

    path: Path
    entries: dict[str, dict[str, object]]

    @classmethod
    def load(cls, directory: Path) -> Lock:
        path = directory / LOCK_NAME
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            data = {}
        except (OSError, ValueError) as error:
            raise ModelError(
                f"cannot read {path}: {error}; move it away to start over", ExitCode.MODEL
            ) from error
        return cls(path, dict(data.get("files", {})))

    def expected_sha256(self, entry: Entry) -> str | None:
        if entry.sha256:
            return entry.sha256
        recorded = self.entries.get(entry.name)
        return str(recorded["sha256"]) if recorded else None

    def record(self, entry: Entry, sha256: str, size: int) -> None:
        self.entries[entry.name] = {
            "file": entry.file,
            "sha256": sha256,
            "size": size,
            "url": entry.url,
            "recorded": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        }
        self.save()

    def save(self) -> None:
        text = json.dumps({"schema": 1, "files": self.entries}, indent=2, sort_keys=True)
        ensure_writable_dir(self.path.parent)
        write_text_atomically(self.path, text + "\n")


@dataclass(frozen=True)
class Verification:
    entry: Entry
    path: Path
    state: str  # ok | missing | invalid | mismatch | unpinned
    detail: str
    sha256: str | None = None

    @property
    def ok(self) -> bool:
        return self.state == "ok"


def verify(entry: Entry, directory: Path, lock: Lock) -> Verification:
    path = directory / entry.file
    if not path.exists():
        return Verification(
            entry, path, "missing", f"not downloaded: npuctl models fetch {entry.name}"
        )
    try:
        check_model_file(path)
    except ModelError as error:
        return Verification(entry, path, "invalid", str(error))
    size = path.stat().st_size
    if entry.size is not None and size != entry.size:
        return Verification(entry, path, "invalid", f"{size} bytes, expected {entry.size}")
    digest = sha256_of(path)
    expected = lock.expected_sha256(entry)
    if expected is None:
        return Verification(entry, path, "unpinned", "no published or recorded checksum", digest)
    if digest != expected:
        return Verification(
            entry, path, "mismatch", f"sha256 {digest[:16]}..., expected {expected[:16]}...", digest
        )
    source = "published" if entry.sha256 else "recorded at first download"
    return Verification(entry, path, "ok", f"sha256 matches ({source})", digest)
