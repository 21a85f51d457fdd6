"""Download a manifest entry: resumable (HTTP Range), into ``<file>.part`` and renamed only
when complete and verified (size, not a Git LFS pointer, sha256)."""

from __future__ import annotations

import hashlib
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from ..errors import DownloadError
from ..output import progress_bar
from .manifest import Entry
from .store import LFS_POINTER_PREFIX, Lock, ensure_writable_dir, verify

_CHUNK = 1 << 16
_TIMEOUT_SECONDS = 60


@dataclass(frozen=True)
class Fetched:
    entry: Entry
    path: Path
    state: str  # downloaded | present
    sha256: str
    pinned_now: bool


def fetch(entry: Entry, directory: Path, lock: Lock, *, progress: bool = True) -> Fetched:
    ensure_writable_dir(directory)
    target = directory / entry.file
    if target.exists():
        check = verify(entry, directory, lock)
        if check.ok:
            return Fetched(entry, target, "present", check.sha256 or "", False)
    partial = directory / f"{entry.file}.part"
    _download(entry, partial, progress)
    digest = _check_download(entry, partial, lock)
    partial.replace(target)
    pinned_now = lock.expected_sha256(entry) is None
    if pinned_now:
        lock.record(entry, digest, target.stat().st_size)
    return Fetched(entry, target, "downloaded", digest, pinned_now)


def _download(entry: Entry, partial: Path, progress: bool) -> None:
    offset = partial.stat().st_size if partial.exists() else 0
    request = urllib.request.Request(entry.url, headers={"User-Agent": "npuctl"})
    if offset:
        request.add_header("Range", f"bytes={offset}-")
    try:
        response = urllib.request.urlopen(request, timeout=_TIMEOUT_SECONDS)
    except urllib.error.HTTPError as error:
        if error.code == 416 and offset:  # already complete
            return
        raise DownloadError(
            f"cannot download {entry.name} from {entry.url}: HTTP {error.code} {error.reason}"
        ) from error
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise DownloadError(
            f"cannot download {entry.name} from {entry.url}: {reason}; check "
            f"the network or put the file at {partial.with_suffix('')}"
        ) from error
    with response:
        resumed = offset and response.status == 206
        mode = "ab" if resumed else "wb"
        length = response.headers.get("Content-Length")
        total = (int(length) + (offset if resumed else 0)) if length else None
        with (
            partial.open(mode) as stream,
            progress_bar(total, entry.name, shown=progress and total is not None) as bar,
        ):
            if resumed:
                bar.update(offset)
            try:
                while chunk := response.read(_CHUNK):
                    stream.write(chunk)
                    bar.update(len(chunk))
            except OSError as error:
                raise DownloadError(
                    f"download of {entry.name} broke off: {error}; run the "
                    "same command again to resume"
                ) from error
        if total is not None and partial.stat().st_size < total:
            raise DownloadError(
                f"download of {entry.name} broke off at "
                f"{partial.stat().st_size} of {total} bytes; run the same "
                "command again to resume"
            )


def _check_download(entry: Entry, partial: Path, lock: Lock) -> str:
    size = partial.stat().st_size
    with partial.open("rb") as stream:
        head = stream.read(len(LFS_POINTER_PREFIX))
    if head.startswith(LFS_POINTER_PREFIX):
        partial.unlink()
        raise DownloadError(
            f"the server sent a Git LFS pointer ({size} bytes) instead of "
            f"{entry.name}: the URL must point at the resolved file"
        )
    if entry.size is not None and size != entry.size:
        partial.unlink()
        raise DownloadError(f"{entry.name}: got {size} bytes, expected {entry.size}")
    if entry.approx_mb and size < entry.approx_mb * 1e6 * 0.5:
        partial.unlink()
        raise DownloadError(
            f"{entry.name}: got {size} bytes, expected about {entry.approx_mb} MB; not the model"
        )
    digest = hashlib.sha256()
    with partial.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    actual = digest.hexdigest()
    expected = lock.expected_sha256(entry)
    if expected and actual != expected:
        partial.unlink()
        raise DownloadError(
            f"{entry.name}: sha256 {actual} does not match {expected}; the download was discarded"
        )
    return actual
