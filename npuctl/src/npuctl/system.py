"""The machine as doctor and provision see it: files under a root prefix, commands, the user.

Every probe goes through one System, so a test scenario is a fixture directory (files and
small scripts standing in for dkms, modinfo, mokutil, dmesg ...) and an identity, not a
mock of os.
"""

from __future__ import annotations

import os
import platform
import shutil
import stat
import subprocess
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Identity:
    """Who runs npuctl: what opening /dev/aipu depends on."""

    uid: int
    gids: frozenset[int]
    name: str

    @classmethod
    def from_text(cls, text: str) -> Identity:
        """'UID:GID,GID,...:NAME', for inspecting a system image (doctor --root)."""
        uid, gids, name = text.split(":", 2)
        return cls(int(uid), frozenset(int(g) for g in gids.split(",") if g), name)

    @classmethod
    def current(cls) -> Identity:
        return cls(
            os.geteuid(),
            frozenset([os.getegid(), *os.getgroups()]),
            os.environ.get("SUDO_USER") or os.environ.get("USER") or str(os.geteuid()),
        )


@dataclass(frozen=True)
class CommandResult:
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0


@dataclass
class System:
    root: Path = Path("/")
    identity: Identity = field(default_factory=Identity.current)
    timeout: float = 30.0

    @property
    def is_real(self) -> bool:
        return self.root == Path("/")

    def path(self, absolute: str) -> Path:
        return self.root / absolute.lstrip("/")

    def read(self, absolute: str) -> str | None:
        """A file's text, stripped; None when it is missing or unreadable."""
        try:
            return self.path(absolute).read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            return None

    def exists(self, absolute: str) -> bool:
        try:
            return self.path(absolute).exists()
        except OSError:
            return False

    def stat(self, absolute: str) -> os.stat_result | None:
        try:
            return self.path(absolute).stat()
        except OSError:
            return None

    def is_char_device(self, absolute: str) -> bool:
        info = self.stat(absolute)
        return info is not None and stat.S_ISCHR(info.st_mode)

    def listdir(self, absolute: str) -> list[str]:
        try:
            return sorted(entry.name for entry in self.path(absolute).iterdir())
        except OSError:
            return []

    def glob(self, absolute_pattern: str) -> list[str]:
        relative = absolute_pattern.lstrip("/")
        return sorted("/" + str(p.relative_to(self.root)) for p in self.root.glob(relative))

    def group_name(self, gid: int) -> str:
        for line in (self.read("/etc/group") or "").splitlines():
            fields = line.split(":")
            if len(fields) > 2 and fields[2] == str(gid):
                return fields[0]
        return str(gid)

    def may_open(self, info: os.stat_result) -> bool:
        """Whether this identity may read and write a file of this owner, group and mode."""
        mode = stat.S_IMODE(info.st_mode)
        identity = self.identity
        return (
            identity.uid == 0
            or (identity.uid == info.st_uid and mode & 0o600 == 0o600)
            or (info.st_gid in identity.gids and mode & 0o060 == 0o060)
            or mode & 0o006 == 0o006
        )

    def machine(self) -> str:
        return self.read("/proc/sys/kernel/arch") or (
            platform.machine() if self.is_real else "unknown"
        )

    def kernel_release(self) -> str:
        return self.read("/proc/sys/kernel/osrelease") or (
            platform.release() if self.is_real else "unknown"
        )

    def which(self, command: str) -> str | None:
        if self.is_real:
            return shutil.which(command)
        for directory in (
            "/usr/local/sbin",
            "/usr/local/bin",
            "/usr/sbin",
            "/usr/bin",
            "/sbin",
            "/bin",
        ):
            candidate = self.path(f"{directory}/{command}")
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
        return None

    def run(self, *argv: str) -> CommandResult | None:
        """A command's result; None when the command is not installed."""
        executable = self.which(argv[0])
        if executable is None:
            return None
        env = {**os.environ, "LC_ALL": "C"}
        if not self.is_real:
            env["NPUCTL_ROOT"] = str(self.root)  # fixture scripts find their data there
        try:
            result = subprocess.run(
                [executable, *argv[1:]],
                capture_output=True,
                text=True,
                errors="replace",
                timeout=self.timeout,
                env=env,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return CommandResult(124, "", f"{argv[0]} timed out after {self.timeout:.0f} s")
        except OSError as error:
            return CommandResult(126, "", str(error))
        return CommandResult(result.returncode, result.stdout, result.stderr)
