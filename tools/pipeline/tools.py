"""Running external programs with one-line errors when they are missing or fail."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from .errors import BuildError, ExitCode

# Which Debian package provides each tool, so a missing one is a one-line fix.
TOOL_PACKAGES = {
    "git": "git",
    "quilt": "quilt",
    "tar": "tar",
    "xz": "xz-utils",
    "dpkg-buildpackage": "dpkg-dev",
    "dpkg-source": "dpkg-dev",
    "dh": "debhelper",
    "dh_dkms": "dh-dkms",
    "lintian": "lintian",
    "make": "make",
    "fakeroot": "fakeroot",
    "depmod": "kmod",
    "piuparts": "piuparts",
}


def require_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        package = TOOL_PACKAGES.get(name, name)
        raise BuildError(
            f"{name} is not installed: run 'sudo apt-get install {package}'", ExitCode.TOOL
        )
    return path


def run(
    command: Sequence[str | Path],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    failure: str,
    code: ExitCode,
) -> subprocess.CompletedProcess[str]:
    """Run a command; on failure raise BuildError with ``failure`` and the last error line."""
    require_tool(str(command[0]))
    result = subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env=None if env is None else dict(env),
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        detail = last_line(result.stderr) or last_line(result.stdout)
        raise BuildError(f"{failure}: {detail}" if detail else failure, code)
    return result


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""
