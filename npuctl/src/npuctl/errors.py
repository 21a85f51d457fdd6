"""Every failure a user can act on, as one exception type with a documented exit code."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """npuctl's exit codes (README: "Exit codes")."""

    OK = 0
    INTERNAL = 1  # npuctl itself failed (a bug)
    USAGE = 2  # bad arguments, unknown model name
    INPUT = 3  # bad input: missing file, not an image, empty or over-long text
    MODEL = 4  # model file missing, invalid, an LFS pointer, or crashing the library
    NPU = 5  # libnoe missing or unloadable, context, inference error or timeout
    DOWNLOAD = 6  # network failure, size or checksum mismatch
    DOCTOR_WARNINGS = 10  # doctor: warnings, no failure
    DOCTOR_FAILURES = 11  # doctor: at least one failure
    INTERRUPTED = 130  # Ctrl-C


class NpuctlError(Exception):
    """A failure explained in one line (what is wrong, what to do)."""

    code: ExitCode = ExitCode.INTERNAL

    def __init__(self, message: str, code: ExitCode | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class InputError(NpuctlError):
    code = ExitCode.INPUT


class ModelError(NpuctlError):
    code = ExitCode.MODEL


class NpuError(NpuctlError):
    code = ExitCode.NPU


class DownloadError(NpuctlError):
    code = ExitCode.DOWNLOAD
