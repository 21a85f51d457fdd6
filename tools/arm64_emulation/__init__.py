"""Whether this amd64 machine runs arm64 programs, and making it so where it can.

The arm64 targets (the arm64 container images, the emulated board's root file system) run
arm64 maintainer scripts inside a chroot, so the kernel must hand arm64 programs to
qemu-user-static through binfmt_misc with flag F (the interpreter is opened when registered,
so it need not exist inside the chroot). Debian's qemu-user-static ships the entry; an init
system normally mounts binfmt_misc and enables it, and without one nothing does.

Every answer is one line naming what is missing on this machine and the command that supplies
it; ``make deps``, the image tool, the emulated board and the tests print that same line.
"""

from __future__ import annotations

import errno
import os
import platform
import shutil
import struct
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pipeline.tools import run

BINFMT_DIR = Path("/proc/sys/fs/binfmt_misc")
ENTRY = "qemu-aarch64"
# What Debian's qemu-user-static registers (fix_binary yes, preserve yes).
ENTRY_DESCRIPTION = Path("/usr/share/binfmts/qemu-aarch64")
REQUIRED_FLAG = "F"
PROBE_EXIT = 42
# The CPU that QEMU emulates for arm64, in user mode (QEMU_CPU, see environment()) and in
# the kernel lab's virtual machines (-cpu). QEMU's "max" authenticates pointers with the
# architected QARMA cipher, computed in software at every signed return, and Debian's arm64
# builds sign them all: Python ran about four times slower. The implementation-defined
# algorithm keeps the same CPU features (pointer authentication included), only the cipher
# is cheaper.
QEMU_CPU = "max,pauth-impdef=on"


def environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (else this process's environment) with the CPU that arm64 programs run on
    under qemu-user: qemu reads QEMU_CPU from the environment of each program it runs, so it
    reaches through chroot and mmdebstrap to the maintainer scripts."""
    found = dict(os.environ if base is None else base)
    found.setdefault("QEMU_CPU", QEMU_CPU)
    return found


def _probe_program() -> bytes:
    """The smallest static arm64 Linux program: exit(42). Three instructions after one ELF
    header and one loadable segment; it runs only where arm64 is emulated or native."""
    base = 0x400000
    code = struct.pack(
        "<3I",
        0xD2800000 | (PROBE_EXIT << 5),  # movz x0, #42
        0xD2800000 | (93 << 5) | 8,  # movz x8, #93 (exit)
        0xD4000001,  # svc #0
    )
    header_size, segment_size = 64, 56
    entry = base + header_size + segment_size
    total = header_size + segment_size + len(code)
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)
    header = ident + struct.pack(
        "<HHIQQQIHHHHHH",
        2,
        0xB7,
        1,
        entry,
        header_size,
        0,
        0,
        header_size,
        segment_size,
        1,
        0,
        0,
        0,
    )
    segment = struct.pack("<IIQQQQQQ", 1, 5, 0, base, base, total, total, 0x1000)
    return header + segment + code


@dataclass(frozen=True)
class Missing:
    """Why arm64 programs do not run here, and the host's command that makes them."""

    what: str
    command: str

    def line(self) -> str:
        return f"arm64 emulation: {self.what}: {self.command}"


def _sudo() -> str:
    return "" if os.geteuid() == 0 else "sudo "


def _mount_command(binfmt_dir: Path) -> str:
    return f"{_sudo()}mount -t binfmt_misc binfmt_misc {binfmt_dir}"


def _enable_command() -> str:
    return f"{_sudo()}update-binfmts --enable {ENTRY}"


def runs_arm64_programs() -> bool:
    """An arm64 program really runs: the kernel's verdict, whatever binfmt_misc shows."""
    with tempfile.TemporaryDirectory(prefix="arm64-probe-") as folder:
        program = Path(folder) / "exit42"
        program.write_bytes(_probe_program())
        program.chmod(0o755)
        try:
            result = subprocess.run([str(program)], capture_output=True, timeout=30, check=False)
        except OSError:
            return False
        except subprocess.TimeoutExpired:
            return False
    return result.returncode == PROBE_EXIT


def _entry_flags(text: str) -> str:
    return "".join(
        line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("flags:")
    )


def missing(binfmt_dir: Path = BINFMT_DIR) -> Missing | None:
    """None when arm64 programs run here as the arm64 targets need; else what is missing."""
    if platform.machine() == "aarch64":
        return None
    if not ENTRY_DESCRIPTION.is_file():
        return Missing(
            "qemu-user-static is not installed",
            f"{_sudo()}apt-get install qemu-user-static binfmt-support",
        )
    status = binfmt_dir / "status"
    if not status.is_file():
        if runs_arm64_programs():  # a container that shares its host's binfmt_misc
            return None
        return Missing(
            f"binfmt_misc is not mounted at {binfmt_dir}",
            f"{_mount_command(binfmt_dir)} && {_enable_command()}",
        )
    if status.read_text(encoding="utf-8").strip() != "enabled":
        return Missing("binfmt_misc is switched off", f"echo 1 | {_sudo()}tee {status}")
    entry = binfmt_dir / ENTRY
    if not entry.is_file():
        return Missing(f"{ENTRY} is not registered with binfmt_misc", _enable_command())
    text = entry.read_text(encoding="utf-8", errors="replace")
    if not text.startswith("enabled"):
        return Missing(f"{ENTRY} is disabled in binfmt_misc", f"echo 1 | {_sudo()}tee {entry}")
    if REQUIRED_FLAG not in _entry_flags(text):
        return Missing(
            f"{ENTRY} is registered without flag F, which chroots need",
            f"echo -1 | {_sudo()}tee {entry} && {_enable_command()}",
        )
    if not runs_arm64_programs():
        return Missing(
            f"{ENTRY} is enabled but an arm64 program does not run",
            f"{_sudo()}apt-get install --reinstall qemu-user-static",
        )
    return None


def _mount(binfmt_dir: Path) -> Missing | None:
    result = run(
        ["mount", "-t", "binfmt_misc", "binfmt_misc", binfmt_dir],
        check=False,
        failure="mounting binfmt_misc",
    )
    if result.returncode == 0:
        return None
    filesystems = Path("/proc/filesystems").read_text(encoding="utf-8")
    if "binfmt_misc" not in filesystems:
        if shutil.which("modprobe"):  # a container may have no kmod
            run(["modprobe", "binfmt_misc"], check=False, failure="modprobe binfmt_misc")
        if "binfmt_misc" not in Path("/proc/filesystems").read_text(encoding="utf-8"):
            return Missing(
                "this kernel has no binfmt_misc (CONFIG_BINFMT_MISC)",
                "on a host whose kernel has it: sudo modprobe binfmt_misc",
            )
    said = (result.stderr.strip().splitlines() or ["mount failed"])[0].rsplit(": ", 1)[-1]
    return Missing(
        f"binfmt_misc cannot be mounted here ({said.rstrip('.')}: a container that forbids it)",
        "on the host: sudo apt-get install qemu-user-static binfmt-support && "
        f"sudo mount -t binfmt_misc binfmt_misc {binfmt_dir} && "
        f"sudo update-binfmts --enable {ENTRY}",
    )


def _write(path: Path, value: str) -> Missing | None:
    try:
        path.write_text(value, encoding="ascii")
    except OSError as error:
        reason = os.strerror(error.errno or errno.EIO)
        return Missing(f"cannot write {path} ({reason})", f"on the host: {_enable_command()}")
    return None


def ensure(binfmt_dir: Path = BINFMT_DIR) -> Missing | None:
    """Mount binfmt_misc, switch it on, and enable (or re-register with flag F) the arm64
    entry, each only when needed; None when arm64 programs then run, else what is missing."""
    found = missing(binfmt_dir)
    if found is None or os.geteuid() != 0 or not ENTRY_DESCRIPTION.is_file():
        return found
    status, entry = binfmt_dir / "status", binfmt_dir / ENTRY
    if not status.is_file() and (failed := _mount(binfmt_dir)):
        return failed
    if status.read_text(encoding="utf-8").strip() != "enabled" and (failed := _write(status, "1")):
        return failed
    if entry.is_file():
        text = entry.read_text(encoding="utf-8", errors="replace")
        if REQUIRED_FLAG not in _entry_flags(text):
            if failed := _write(entry, "-1"):
                return failed
        elif not text.startswith("enabled") and (failed := _write(entry, "1")):
            return failed
    if not entry.is_file():
        if not shutil.which("update-binfmts"):
            return Missing(
                "update-binfmts is not installed", f"{_sudo()}apt-get install binfmt-support"
            )
        result = run(["update-binfmts", "--enable", ENTRY], check=False, failure="update-binfmts")
        if result.returncode != 0:
            return Missing(
                f"update-binfmts could not enable {ENTRY} ({result.stderr.strip()})",
                f"on the host: {_enable_command()}",
            )
    return missing(binfmt_dir)
