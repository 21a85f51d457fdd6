"""Provisioning of an RK3588 board: the render group, Mesa Teflon from trixie-backports with
an apt pin, the vendor rknpu driver blacklisted, the TFLite runtime, the models."""

from __future__ import annotations

import re
import shutil

from npuctl.provision.actions import (
    Action,
    Request,
    group_action,
    models_action,
    run_command,
    write_file,
)
from npuctl.system import System

from .doctor import TEFLON_MINIMUM, TEFLON_PACKAGE, teflon_release, teflon_version
from .litert import REQUIREMENT, RUNTIME_DIR

ACTIONS = ("group", "backports", "teflon-pin", "teflon", "rknpu-blacklist", "litert", "models")
BACKPORTS_SOURCE = "/etc/apt/sources.list.d/npuctl-trixie-backports.sources"
PIN = "/etc/apt/preferences.d/npuctl-teflon.pref"
BLACKLIST = "/etc/modprobe.d/npuctl-rknpu-blacklist.conf"
SUITE = "trixie-backports"  # the suite whose Mesa drives rocket (Mesa >= 25.3)

SOURCE_TEXT = f"""# Mesa's Teflon delegate for the RK3588 NPU (added by npuctl provision)
Types: deb
URIs: http://deb.debian.org/debian
Suites: {SUITE}
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""
PIN_TEXT = f"""# Teflon drives rocket from Mesa 25.3 on: follow {SUITE} for it (npuctl provision)
Package: {TEFLON_PACKAGE}
Pin: release n={SUITE}
Pin-Priority: 500
"""
BLACKLIST_TEXT = """# The vendor NPU driver and rocket cannot share the NPU (npuctl provision)
blacklist rknpu
install rknpu /bin/false
"""


def default_actions(request: Request) -> list[str]:
    vendor = request.system.exists("/sys/module/rknpu") or bool(
        request.system.glob("/lib/modules/*/**/rknpu.ko*")
    )
    return [name for name in ACTIONS if name != "rknpu-blacklist" or vendor]


def action(name: str, request: Request) -> Action:
    system = request.system
    if name == "group":
        return group_action(system, request.user, request.group)
    if name == "backports":
        return _file_action(system, name, BACKPORTS_SOURCE, SOURCE_TEXT, f"apt source {SUITE}")
    if name == "teflon-pin":
        return _file_action(system, name, PIN, PIN_TEXT, f"apt pin of {TEFLON_PACKAGE}")
    if name == "teflon":
        return _teflon_action(system)
    if name == "rknpu-blacklist":
        return _file_action(system, name, BLACKLIST, BLACKLIST_TEXT, "rknpu blacklisted")
    if name == "litert":
        return _litert_action(system)
    return models_action(system, request.models_dir, request.fetch_models, "*.tflite")


def _has_backports(system: System) -> bool:
    sources = [system.read("/etc/apt/sources.list") or ""] + [
        system.read(path) or "" for path in system.glob("/etc/apt/sources.list.d/*")
    ]
    return any(re.search(rf"\b{SUITE}\b", text) for text in sources)


def _file_action(system: System, name: str, path: str, text: str, what: str) -> Action:
    def is_done() -> bool:
        if name == "backports" and system.read(path) is None:
            return _has_backports(system)  # the user's own source counts
        return system.read(path) == text.strip()

    return Action(
        name,
        f"{what} ({path})",
        is_done,
        lambda: write_file(system, path, text),
        lambda: system.path(path).unlink(missing_ok=True),
        commands=tuple(f"{path}: {line}" for line in text.strip().splitlines()),
    )


def _teflon_action(system: System) -> Action:
    install = ("apt-get", "install", "-y", "-t", SUITE, TEFLON_PACKAGE)

    def is_done() -> bool:
        release = teflon_release(teflon_version(system))
        return release is not None and release >= TEFLON_MINIMUM

    def apply() -> None:
        run_command(system, "apt-get", "update")
        run_command(system, *install)

    return Action(
        "teflon",
        f"install {TEFLON_PACKAGE} from {SUITE} (Mesa >= 25.3 drives rocket)",
        is_done,
        apply,
        lambda: run_command(system, "apt-get", "remove", "-y", TEFLON_PACKAGE),
        commands=("apt-get update", " ".join(install)),
    )


def _litert_action(system: System) -> Action:
    target = system.path(RUNTIME_DIR)
    install = (
        "python3",
        "-m",
        "pip",
        "install",
        "--quiet",
        "--target",
        str(target),
        REQUIREMENT,
    )

    return Action(
        "litert",
        f"install the TFLite runtime {REQUIREMENT} into {RUNTIME_DIR} (not packaged by Debian)",
        lambda: (target / "ai_edge_litert").is_dir(),
        lambda: run_command(system, *install),
        lambda: shutil.rmtree(target, ignore_errors=True),
        commands=(" ".join(install),),
    )
