"""Both architectures of an image under one name in a registry: a manifest list made and
pushed by podman from the archives in dist/images."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from .errors import ExitCode, ImageError


def push(reference: str, archives: list[Path], tls_verify: bool = True) -> None:
    podman = shutil.which("podman")
    if podman is None:
        raise ImageError("podman is not installed: sudo apt install podman", ExitCode.TOOL)

    def run(*arguments: str) -> None:
        result = subprocess.run([podman, *arguments], capture_output=True, text=True, check=False)
        if result.returncode != 0:
            last = (result.stderr.strip().splitlines() or ["(no message)"])[-1]
            raise ImageError(f"podman {arguments[0]} {arguments[1]}: {last}", ExitCode.BUILD)

    subprocess.run([podman, "manifest", "rm", reference], capture_output=True, check=False)
    subprocess.run([podman, "rmi", "-f", reference], capture_output=True, check=False)
    try:
        run("manifest", "create", reference)
        for archive in archives:
            run("manifest", "add", reference, f"oci-archive:{archive.resolve()}")
        run(
            "manifest",
            "push",
            "--all",
            f"--tls-verify={'true' if tls_verify else 'false'}",
            reference,
            f"docker://{reference}",
        )
    finally:
        subprocess.run([podman, "manifest", "rm", reference], capture_output=True, check=False)
