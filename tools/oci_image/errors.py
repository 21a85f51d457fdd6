"""Failures of `python -m oci_image`, each one line with what to do, and its exit code."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Exit codes of ``python -m oci_image`` (documented in the README)."""

    OK = 0
    USAGE = 2  # bad arguments or a broken images/<name>.yaml
    INPUT = 3  # a .deb the image installs is not in dist/ ('make deb' first)
    ARCHIVE = 4  # Debian's archive or PyPI cannot be reached
    TOOL = 5  # a build tool or the arm64 emulation (binfmt) is missing
    BUILD = 7  # mmdebstrap, pip or the push failed


class ImageError(Exception):
    def __init__(self, message: str, code: ExitCode) -> None:
        super().__init__(message)
        self.code = code
