"""One file of a git repository at a commit, verified by its sha256."""

from __future__ import annotations

import hashlib
import subprocess
import tempfile
from pathlib import Path

_NEUTRAL = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_TERMINAL_PROMPT": "0",
}


def _blob(source: str, commit: str, path: str) -> bytes | None:
    with tempfile.TemporaryDirectory(prefix="blob-") as scratch:
        if Path(source).is_dir():
            git = ["git", "-C", source]
        else:
            git = ["git", "-C", scratch]
            for step in (
                ["init", "-q"],
                ["fetch", "-q", "--depth", "1", "--filter=blob:none", source, commit],
            ):
                if subprocess.run([*git, *step], capture_output=True, env=_NEUTRAL).returncode:
                    return None
        result = subprocess.run(
            [*git, "cat-file", "blob", f"{commit}:{path}"], capture_output=True, env=_NEUTRAL
        )
    return result.stdout if result.returncode == 0 else None


def fetch_blob(sources: list[str], commit: str, path: str, sha256: str) -> bytes:
    """``path`` at ``commit`` from the first of ``sources`` (local clones or URLs) that has it
    as pinned; RuntimeError naming what was tried when none does."""
    for source in filter(None, sources):
        content = _blob(source, commit, path)
        if content is not None and hashlib.sha256(content).hexdigest() == sha256:
            return content
    tried = ", ".join(filter(None, sources))
    raise RuntimeError(f"no pinned {path} at {commit[:12]} in {tried}")
