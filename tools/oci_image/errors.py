"""Failures of `python -m oci_image`, each one line with what to do, and its exit code (the
tools' shared ExitCode)."""

from __future__ import annotations

from pipeline.errors import ExitCode


class ImageError(Exception):
    def __init__(self, message: str, code: ExitCode) -> None:
        super().__init__(message)
        self.code = code
