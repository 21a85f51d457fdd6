"""One exception type for every failure a user can fix, with a documented exit code."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Exit codes of ``python -m pipeline`` (documented in the README)."""

    OK = 0
    USAGE = 2  # bad arguments or a broken dkms/<package>.yaml
    VERIFY = 3  # the upstream tree is not the pinned one
    UPSTREAM = 4  # the upstream source could not be reached or read
    TOOL = 5  # a build tool is missing
    PATCH = 6  # the quilt series does not apply
    BUILD = 7  # dpkg-buildpackage, lintian or kbuild failed


class BuildError(Exception):
    """A failure explained in one line: what is wrong and what to do."""

    def __init__(self, message: str, code: ExitCode) -> None:
        super().__init__(message)
        self.code = code
