"""Provisioning of a Zhouyi board: the device group, NPU power, the models, and CIX's
user-mode driver (libnoe) without its pip postinst."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from npuctl.errors import ExitCode
from npuctl.provision.actions import (
    Action,
    ProvisionError,
    Request,
    group_action,
    models_action,
    run_command,
    write_file,
)
from npuctl.system import System

CIX_LIBRARY_DIR = "/usr/share/cix/lib"
LD_CONF = "/etc/ld.so.conf.d/cix-noe.conf"
RUNTIME_PM_RULE = "/etc/udev/rules.d/61-aipu-runtime-pm.rules"
RUNTIME_PM_CONTROL = "/sys/bus/platform/devices/CIXH4000:00/power/control"
UMD_PACKAGE = "cix-noe-umd"

ACTIONS = ("group", "runtime-pm", "models", "umd", "ld-path")


def default_actions(request: Request) -> list[str]:
    return [
        "group",
        "runtime-pm",
        "models",
        *(["umd"] if request.options.get("umd_deb") else []),
        *(["ld-path"] if request.options.get("ld_path") else []),
    ]


def action(name: str, request: Request) -> Action:
    system = request.system
    if name == "group":
        return group_action(system, request.user, request.group)
    if name == "runtime-pm":
        return runtime_pm_action(system)
    if name == "models":
        return models_action(system, request.models_dir, request.fetch_models, "*.cix")
    if name == "ld-path":
        return ld_path_action(system)
    deb = request.options.get("umd_deb")
    if deb is None:
        raise ProvisionError("--only umd needs --umd-deb FILE")
    return umd_action(system, Path(str(deb)))


def ld_path_action(system: System) -> Action:
    text = (
        f"# libnoe for programs other than npuctl (added by npuctl provision)\n{CIX_LIBRARY_DIR}\n"
    )

    def apply() -> None:
        write_file(system, LD_CONF, text)
        run_command(system, "ldconfig")

    def undo() -> None:
        system.path(LD_CONF).unlink(missing_ok=True)
        run_command(system, "ldconfig")

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
        write_file(system, RUNTIME_PM_RULE, RULE)
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
        run_command(system, "apt-get", "install", "-y", str(kept))

    return Action(
        "umd",
        f"install {deb.name} without its pip postinst (libnoe.so)",
        installed,
        apply,
        lambda: run_command(system, "apt-get", "remove", "-y", UMD_PACKAGE),
    )
