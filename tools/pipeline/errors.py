"""The exit codes every tool of tools/ shares (the pipeline, the kernel lab, make image, the
emulated board), one meaning each, documented once (docs/development.md); and the pipeline's
exception for a failure a user can fix."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Exit codes of python -m pipeline, kernel_lab, oci_image and rocket_emu."""

    OK = 0
    FAILED = 1  # a check failed (the emulated board's doctor, golden or serve checks)
    USAGE = 2  # bad arguments or a broken description (dkms/, images/, emulation/)
    INPUT = 3  # an input is missing or is not the pinned one (upstream tree, a .deb, a pin)
    UNREACHABLE = 4  # a source could not be reached or read (upstream, Debian, PyPI)
    TOOL = 5  # a build tool is missing
    PATCH = 6  # a quilt series does not apply
    BUILD = 7  # a build failed (dpkg-buildpackage, lintian, kbuild, mmdebstrap, QEMU, DKMS)
    # The same codes by the names the pipeline and make image give them.
    VERIFY = INPUT
    UPSTREAM = UNREACHABLE
    ARCHIVE = UNREACHABLE


class BuildError(Exception):
    """A failure explained in one line: what is wrong and what to do."""

    def __init__(self, message: str, code: ExitCode) -> None:
        super().__init__(message)
        self.code = code
