"""Both architectures of an image under one name in a registry: a manifest list made and
pushed by podman from the archives in dist/images."""

from __future__ import annotations

import shutil
from pathlib import Path

from pipeline.tools import run

from .errors import ExitCode, ImageError


def push(reference: str, archives: list[Path], tls_verify: bool = True) -> None:
    podman = shutil.which("podman")
    if podman is None:
        raise ImageError("podman is not installed: sudo apt install podman", ExitCode.TOOL)

    def podman_run(*arguments: str, check: bool = True) -> None:
        run([podman, *arguments], check=check, failure=f"podman {arguments[0]} {arguments[1]}")

    podman_run("manifest", "rm", reference, check=False)
    podman_run("rmi", "-f", reference, check=False)
    try:
        podman_run("manifest", "create", reference)
        for archive in archives:
            podman_run("manifest", "add", reference, f"oci-archive:{archive.resolve()}")
        podman_run(
            "manifest",
            "push",
            "--all",
            f"--tls-verify={'true' if tls_verify else 'false'}",
            reference,
            f"docker://{reference}",
        )
    finally:
        podman_run("manifest", "rm", reference, check=False)
