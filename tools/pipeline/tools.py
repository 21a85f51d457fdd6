"""Running external programs, the one way every tool of tools/ does: a timeout on each, and
one-line errors when a program is missing, fails or hangs."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

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
    "aarch64-linux-gnu-g++": "g++-aarch64-linux-gnu",
    "aarch64-linux-gnu-strip": "binutils-aarch64-linux-gnu",
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


# A step that gives no answer for this long is stuck; the longest (a kernel headers install
# with its DKMS builds, a piuparts run) take minutes. Builds that take longer say so.
DEFAULT_TIMEOUT = 1800.0


def run(
    command: Sequence[str | Path],
    *,
    failure: str,
    code: ExitCode = ExitCode.BUILD,
    timeout: float = DEFAULT_TIMEOUT,
    check: bool = True,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    input_data: str | bytes | None = None,
    output: IO[str] | IO[bytes] | None = None,
    text: bool = True,
) -> subprocess.CompletedProcess:
    """The one way the tools run a program: a missing tool, a timeout and (with ``check``) a
    failure each raise BuildError with one line, ``failure`` and the last line the program
    wrote. Output is captured, or with ``output`` written there (stderr too)."""
    program = str(command[0])
    if "/" in program:  # a program of the tree being built (../configure): no package has it
        where = (cwd or Path.cwd()) / program
        if not where.is_file():
            raise BuildError(f"{failure}: {where} does not exist", code)
    else:
        require_tool(program)
    arguments = [str(part) for part in command]
    try:
        result = subprocess.run(
            arguments,
            cwd=cwd,
            env=None if env is None else dict(env),
            input=input_data,
            stdout=subprocess.PIPE if output is None else output,
            stderr=subprocess.PIPE if output is None else subprocess.STDOUT,
            text=text,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise BuildError(
            f"{failure}: {Path(arguments[0]).name} gave no answer within {timeout:g} s", code
        ) from None
    if check and result.returncode != 0:
        detail = last_line(_text(result.stderr)) or last_line(_text(result.stdout))
        raise BuildError(f"{failure}: {detail}" if detail else failure, code)
    return result


def _text(value: str | bytes | None) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else value.decode("utf-8", "replace")


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""
