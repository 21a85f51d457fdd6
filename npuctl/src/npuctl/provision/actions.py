"""Provisioning actions. Each knows whether it is already done, how to do it and how to undo
it, so provision is idempotent, --dry-run can say what it would do and --undo reverses it.
Everything goes through System (files under its root, its commands)."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..doctor.system import System
from ..errors import ExitCode, NpuctlError

CIX_LIBRARY_DIR = "/usr/share/cix/lib"
LD_CONF = "/etc/ld.so.conf.d/cix-noe.conf"
RUNTIME_PM_RULE = "/etc/udev/rules.d/61-aipu-runtime-pm.rules"
RUNTIME_PM_CONTROL = "/sys/bus/platform/devices/CIXH4000:00/power/control"
UMD_PACKAGE = "cix-noe-umd"


class ProvisionError(NpuctlError):
    code = ExitCode.USAGE


@dataclass
class Action:
    name: str
    description: str
    is_done: Callable[[], bool]
    apply: Callable[[], None]
    undo: Callable[[], None]


def _run(system: System, *argv: str) -> None:
    result = system.run(*argv)
    if result is None:
        raise ProvisionError(
            f"{argv[0]} is not installed: cannot {' '.join(argv)}", ExitCode.INTERNAL
        )
    if not result.ok:
        detail = (result.stderr or result.stdout).strip().splitlines()
        raise ProvisionError(
            f"'{' '.join(argv)}' failed: {detail[-1] if detail else ''}", ExitCode.INTERNAL
        )


def _write(system: System, absolute: str, text: str) -> None:
    path = system.path(absolute)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    with open(handle, "w", encoding="utf-8") as stream:  # noqa: PTH123
        stream.write(text)
    Path(temporary).chmod(0o644)
    Path(temporary).replace(path)


def group_action(system: System, user: str, group: str) -> Action:
    def members() -> list[str]:
        for line in (system.read("/etc/group") or "").splitlines():
            fields = line.split(":")
            if fields[0] == group and len(fields) > 3:
                return [m for m in fields[3].split(",") if m]
        return []

    return Action(
        "group",
        f"add {user} to group {group} (may open /dev/aipu; next login)",
        lambda: user in members(),
        lambda: _run(system, "gpasswd", "-a", user, group),
        lambda: _run(system, "gpasswd", "-d", user, group),
    )


def ld_path_action(system: System) -> Action:
    text = (
        f"# libnoe for programs other than npuctl (added by npuctl provision)\n{CIX_LIBRARY_DIR}\n"
    )

    def apply() -> None:
        _write(system, LD_CONF, text)
        _run(system, "ldconfig")

    def undo() -> None:
        system.path(LD_CONF).unlink(missing_ok=True)
        _run(system, "ldconfig")

    return Action(
        "ld-path",
        f"add {CIX_LIBRARY_DIR} to the dynamic linker path ({LD_CONF})",
        lambda: system.read(LD_CONF) == text.strip(),
        apply,
        undo,
    )


RULE = (
    "# Runtime power management can stall the NPU: keep it powered (npuctl provision)\n"
    'ACTION=="add|bind", SUBSYSTEM=="platform", KERNEL=="CIXH4000:00", '
    'ATTR{power/control}="on"\n'
)


def runtime_pm_action(system: System) -> Action:
    def set_now(value: str) -> None:  # the rule applies from the next boot; this, at once
        if system.exists(RUNTIME_PM_CONTROL):
            system.path(RUNTIME_PM_CONTROL).write_text(f"{value}\n", encoding="utf-8")

    def apply() -> None:
        _write(system, RUNTIME_PM_RULE, RULE)
        set_now("on")

    def undo() -> None:
        system.path(RUNTIME_PM_RULE).unlink(missing_ok=True)
        set_now("auto")

    return Action(
        "runtime-pm",
        f"keep the NPU powered (power/control=on, {RUNTIME_PM_RULE})",
        lambda: system.read(RUNTIME_PM_RULE) == RULE.strip(),
        apply,
        undo,
    )


def repack_without_pip(deb: Path, workdir: Path) -> Path:
    """The vendor package with the pip calls removed from its postinst (its wheels exist for
    Python 3.11/3.12 only, so the postinst fails on newer Pythons); nothing else changes."""
    unpacked = workdir / "unpacked"
    result = subprocess.run(
        ["dpkg-deb", "-R", str(deb), str(unpacked)], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise ProvisionError(
            f"{deb} is not a Debian package: {result.stderr.strip()}", ExitCode.INPUT
        )
    control = (unpacked / "DEBIAN" / "control").read_text(encoding="utf-8")
    if not re.search(rf"^Package: {UMD_PACKAGE}$", control, re.MULTILINE):
        raise ProvisionError(f"{deb} is not CIX's {UMD_PACKAGE} package", ExitCode.INPUT)
    postinst = unpacked / "DEBIAN" / "postinst"
    if postinst.exists():
        lines = postinst.read_text(encoding="utf-8").splitlines()
        kept = [
            f": # removed by npuctl provision: {line.strip()}"
            if re.search(r"\bpip3?\b|-m pip\b", line)
            else line
            for line in lines
        ]
        postinst.write_text("\n".join(kept) + "\n", encoding="utf-8")
    target = workdir / deb.name
    result = subprocess.run(
        ["dpkg-deb", "-b", str(unpacked), str(target)], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise ProvisionError(f"repacking {deb} failed: {result.stderr.strip()}")
    return target


def umd_action(system: System, deb: Path) -> Action:
    def installed() -> bool:
        status = system.run("dpkg-query", "-W", "-f=${Status}", UMD_PACKAGE)
        return bool(status and status.ok and "install ok installed" in status.stdout)

    def apply() -> None:
        with tempfile.TemporaryDirectory(prefix="npuctl-umd-") as scratch:
            repacked = repack_without_pip(deb, Path(scratch))
            kept = system.path("/var/cache/npuctl") / repacked.name
            kept.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(repacked, kept)
        _run(system, "apt-get", "install", "-y", str(kept))

    return Action(
        "umd",
        f"install {deb.name} without its pip postinst (libnoe.so)",
        installed,
        apply,
        lambda: _run(system, "apt-get", "remove", "-y", UMD_PACKAGE),
    )


def models_action(system: System, directory: Path, fetch_all: Callable[[], None]) -> Action:
    def undo() -> None:
        shutil.rmtree(directory, ignore_errors=True)

    def is_done() -> bool:
        return directory.is_dir() and any(directory.glob("*.cix"))

    def apply() -> None:
        directory.mkdir(parents=True, exist_ok=True)
        directory.chmod(0o755)
        fetch_all()

    return Action(
        "models", f"create {directory} and fetch the default models", is_done, apply, undo
    )
