"""Provisioning of a Zhouyi board: the device group, the models, CIX's user-mode driver
(libnoe) without its pip postinst, and libnoe on the linker path (its site-files/).
Keeping the NPU powered is no action: every board needs it, so aipu-dkms ships the rule."""

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
)
from npuctl.provision.site_files import file_action
from npuctl.system import System

UMD_PACKAGE = "cix-noe-umd"


def action(name: str, request: Request) -> Action:
    system = request.system
    if name == "group":
        return group_action(system, request.user, request.group)
    if name == "models":
        return models_action(system, request.models_dir, request.fetch_models, "*.cix")
    if name == "ld-path":
        return ld_path_action(system)
    deb = request.options.get("umd_deb")
    if deb is None:
        raise ProvisionError("--only umd needs --umd-deb FILE")
    return umd_action(system, Path(str(deb)))


def ld_path_action(system: System) -> Action:
    return file_action(
        system,
        "ld-path",
        "add libnoe's folder to the dynamic linker path",
        after_apply=lambda: run_command(system, "ldconfig"),
        after_undo=lambda: run_command(system, "ldconfig"),
        commands=("ldconfig",),
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
