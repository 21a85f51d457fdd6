"""Proof that a file loads: libnoe may see a file in-process only after this very file (same
size, mtime and sha256) has once loaded in a child process with this very library.

A checksum alone proves nothing about loading: a file pinned at its first download can be a
truncated mirror, another file served under the right name, or damaged on disk, and any of
these segfaults libnoe. The proofs are per user, in ``$XDG_CACHE_HOME/npuctl``; a proof that
cannot be saved costs one more child load next time, nothing else.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from dataclasses import dataclass
from pathlib import Path

from ..files import sha256_of, write_text_atomically

PROOFS_NAME = "load-proofs.json"
_KEEP = 64  # proofs kept; the oldest go first


@dataclass(frozen=True)
class FileIdentity:
    path: Path
    size: int
    mtime_ns: int
    sha256: str

    @classmethod
    def of(cls, path: Path, sha256: str | None = None) -> FileIdentity:
        stat = path.stat()
        return cls(path, stat.st_size, stat.st_mtime_ns, sha256 or sha256_of(path))

    def unchanged(self) -> bool:
        """Still the same file on disk (size and mtime; cheap, no hashing)."""
        try:
            stat = self.path.stat()
        except OSError:
            return False
        return (stat.st_size, stat.st_mtime_ns) == (self.size, self.mtime_ns)


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "npuctl"


class LoadProofs:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path or cache_dir() / PROOFS_NAME

    def _read(self) -> dict[str, dict[str, object]]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            proofs = data.get("proofs", {})
            return proofs if isinstance(proofs, dict) else {}
        except (OSError, ValueError, AttributeError):
            return {}  # no proof is the safe answer

    @staticmethod
    def _key(library: FileIdentity, model: FileIdentity) -> str:
        return f"{library.sha256}:{model.sha256}"

    def proven(self, library: FileIdentity, model: FileIdentity) -> bool:
        proof = self._read().get(self._key(library, model))
        return (
            isinstance(proof, dict)
            and proof.get("model_size") == model.size
            and proof.get("model_mtime_ns") == model.mtime_ns
            and proof.get("library_size") == library.size
            and proof.get("library_mtime_ns") == library.mtime_ns
        )

    def record(self, library: FileIdentity, model: FileIdentity) -> bool:
        """Save the proof; False when the cache cannot be written (then nothing changes)."""
        proofs = self._read()
        proofs[self._key(library, model)] = {
            "model": str(model.path),
            "model_size": model.size,
            "model_mtime_ns": model.mtime_ns,
            "library": str(library.path),
            "library_size": library.size,
            "library_mtime_ns": library.mtime_ns,
            "recorded": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        }
        newest = sorted(proofs.items(), key=lambda item: str(item[1].get("recorded", "")))
        kept = dict(newest[-_KEEP:])
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomically(
                self.path, json.dumps({"schema": 1, "proofs": kept}, indent=2, sort_keys=True)
            )
        except OSError:
            return False
        return True
