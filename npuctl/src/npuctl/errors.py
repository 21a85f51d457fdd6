"""Every failure a user can act on, as one exception type with a documented exit code."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """npuctl's exit codes (README: "Exit codes")."""

    OK = 0
    INTERNAL = 1  # npuctl itself failed (a bug)
    USAGE = 2  # bad arguments, unknown model name, a command whose package is missing
    INPUT = 3  # bad input: missing file, not an image, empty or over-long text
    MODEL = 4  # model file missing, invalid, an LFS pointer, or crashing the library
    NPU = 5  # libnoe missing or unloadable, context, inference error or timeout
    DOWNLOAD = 6  # network failure, size or checksum mismatch
    SERVICE = 7  # serve: cannot listen (address in use, socket path taken)
    DOCTOR_WARNINGS = 10  # doctor: warnings, no failure
    DOCTOR_FAILURES = 11  # doctor: at least one failure
    INTERRUPTED = 130  # Ctrl-C


# What each exit code means, for the manual page (README: "npuctl exit codes").
EXIT_CODES: tuple[tuple[int, str], ...] = (
    (0, "success; doctor: every check passed"),
    (1, "npuctl itself failed (a bug; NPUCTL_DEBUG=1 shows the traceback)"),
    (
        2,
        "usage: bad option, a number out of range, unknown model name, a file that is not a "
        "model, a command whose package is not installed (npuctl-serve, npuctl-watch), an image "
        "root (--root) whose inode table is not one",
    ),
    (
        3,
        "bad input: missing file, not an image, an image over --max-image-pixels, empty "
        "text, text that is not UTF-8, text over 77 tokens without --truncate, an output path "
        "that cannot be written",
    ),
    (
        4,
        "model file missing, invalid, a Git LFS pointer, wrong tensors, or crashing the NPU's "
        "library; "
        "a model directory you may not write to; models verify found nothing to verify",
    ),
    (
        5,
        "the NPU's library missing or unloadable, NPU context, inference error or timeout, a child "
        "process that could not be started",
    ),
    (6, "download: network, size or checksum"),
    (7, "serve: cannot listen (the address is in use, the socket path is taken or not writable)"),
    (10, "doctor: warnings only"),
    (11, "doctor: at least one failure (also on a machine without a supported NPU)"),
    (130, "interrupted (Ctrl-C)"),
)


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
