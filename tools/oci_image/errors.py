"""Failures of `python -m oci_image`, each one line with what to do, and its exit code (the
tools' shared ExitCode)."""

from __future__ import annotations

from pipeline.errors import BuildError, ExitCode

__all__ = ["ExitCode", "ImageError"]  # the image modules take both from here


class ImageError(BuildError):
    """A failure of the image build, one line (a BuildError like every tool's)."""
