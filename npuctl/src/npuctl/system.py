"""The machine as doctor and provision see it: files under a root prefix, commands, the user.

Every probe goes through one System, so a test scenario is a fixture directory (files and
small scripts standing in for dkms, modinfo, mokutil, dmesg ...) and an identity, not a
mock of os.

A tree unpacked without root cannot hold device nodes or files of other owners. Such an
image may say what they are in an inode table, ``<root>/.npuctl-inodes.json``
(``{"/dev/aipu": {"type": "char", "mode": "0660", "uid": 0, "gid": 109, "rdev": "10:123"}}``):
System.stat answers from it for the paths it lists (the file itself must exist). The real
machine (root ``/``) is never read that way.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import stat
import subprocess
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from .errors import ExitCode, NpuctlError

INODE_TABLE = ".npuctl-inodes.json"
FILE_TYPES = {
    "char": stat.S_IFCHR,
    "block": stat.S_IFBLK,
    "file": stat.S_IFREG,
    "dir": stat.S_IFDIR,
}


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
            info = self.path(absolute).stat()
        except OSError:
            return None
        if (inode := self.inode_table.get("/" + absolute.lstrip("/"))) is None:
            return info
        fields = list(info)[:10]  # mode, ino, dev, nlink, uid, gid, size, atime, mtime, ctime
        fields[0], fields[4], fields[5] = inode["mode"], inode["uid"], inode["gid"]
        return os.stat_result(fields, {"st_rdev": inode["rdev"]})

    @cached_property
    def inode_table(self) -> dict[str, dict[str, int]]:
        """The image's inode table (see the module's doc), parsed; empty on the real machine."""
        table = self.root / INODE_TABLE
        if self.is_real or not table.is_file():
            return {}
        try:
            entries = json.loads(table.read_text(encoding="utf-8"))
            parsed: dict[str, dict[str, int]] = {}
            for path, entry in entries.items():
                major, minor = (int(n) for n in str(entry.get("rdev", "0:0")).split(":"))
                parsed[path] = {
                    "mode": FILE_TYPES[entry["type"]] | int(str(entry["mode"]), 8),
                    "uid": int(entry["uid"]),
                    "gid": int(entry["gid"]),
                    "rdev": os.makedev(major, minor),
                }
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
            raise NpuctlError(
                f"{table} is not an inode table ({type(error).__name__}: {error}); fix it or "
                'remove it (format: {"/dev/npu0": {"type": "char", "mode": "0660", "uid": 0, '
                '"gid": 109, "rdev": "10:123"}})',
                ExitCode.USAGE,
            ) from None
        return parsed

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
        if command.startswith("/"):  # a program at its place in the image
            candidate = self.path(command)
            return str(candidate) if candidate.is_file() and os.access(candidate, os.X_OK) else None
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

    def run(self, *argv: str, env: dict[str, str] | None = None) -> CommandResult | None:
        """A command's result; None when the command is not installed. ``env`` adds to the
        environment it runs in."""
        executable = self.which(argv[0])
        if executable is None:
            return None
        env = {**os.environ, "LC_ALL": "C", **(env or {})}
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


def board_name(system: System) -> str:
    """The board's name as its firmware gives it (device tree, else DMI)."""
    return (
        system.read("/sys/firmware/devicetree/base/model")
        or system.read("/sys/class/dmi/id/product_name")
        or system.read("/sys/class/dmi/id/board_name")
        or "unknown board"
    ).strip("\0")
