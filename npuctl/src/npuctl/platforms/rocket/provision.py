"""Provisioning of an RK3588 board: the render group, trixie-backports (its kernel has the
accel core) with an apt pin for Teflon (files of its site-files/), Mesa's Teflon at the
release that computes what npuctl serves where the board's sources have it (the project's
apt repository carries it for trixie; teflon.yaml), the TFLite runtime, the models. The
blacklist of the vendor's rknpu is no action: every RK3588 board needs it, so rocket-dkms
ships it."""

from __future__ import annotations

import re
import shutil

from npuctl.provision.actions import (
    Action,
    Request,
    group_action,
    models_action,
    run_command,
)
from npuctl.provision.site_files import file_action, for_action
from npuctl.system import System

from . import teflon as teflon_description
from .litert import RUNTIME_DIR, requirement

SUITE = "trixie-backports"  # the suite whose kernel has the accel core and Mesa drives rocket


def action(name: str, request: Request) -> Action:
    system = request.system
    if name == "group":
        return group_action(system, request.user, request.group)
    if name == "backports":
        return file_action(
            system,
            name,
            f"apt source {SUITE}",
            is_done=lambda: _has_backports(system),
        )
    if name == "teflon-pin":
        package = teflon_description.description().package
        return file_action(system, name, f"apt pin of {package} to {SUITE} or trixie-teflon")
    if name == "teflon":
        return _teflon_action(system)
    if name == "litert":
        return _litert_action(system)
    return models_action(system, request.models_dir, request.fetch_models, "*.tflite")


def _has_backports(system: System) -> bool:
    """Ours, or the user's own source of the suite."""
    ours = for_action("backports")[0]
    written = system.read(ours.destination)
    if written is not None:
        return written == ours.text().strip()
    sources = [system.read("/etc/apt/sources.list") or ""] + [
        system.read(path) or "" for path in system.glob("/etc/apt/sources.list.d/*")
    ]
    return any(re.search(rf"\b{SUITE}\b", text) for text in sources)


def _teflon_action(system: System) -> Action:
    """The newest Teflon the board's sources offer: with the pin, trixie-backports' (Mesa
    26.1), or the wanted release where a source has it (the project's repository)."""
    known = teflon_description.description()
    install = ("apt-get", "install", "-y", known.package)
    wanted = ".".join(map(str, known.wanted_release))

    def is_done() -> bool:
        installed = teflon_description.release(teflon_description.installed(system))
        if installed is None or installed < known.minimum:
            return False
        candidate = teflon_description.release(teflon_description.candidate(system))
        return installed >= known.wanted_release or candidate is None or candidate <= installed

    def apply() -> None:
        run_command(system, "apt-get", "update")
        run_command(system, *install)

    return Action(
        "teflon",
        f"install {known.package}: Mesa {wanted} from the project's apt repository where "
        f"the board has it, else {SUITE}'s (Mesa >= 25.3 drives rocket)",
        is_done,
        apply,
        lambda: run_command(system, "apt-get", "remove", "-y", known.package),
        commands=("apt-get update", " ".join(install)),
    )


def _litert_action(system: System) -> Action:
    target = system.path(RUNTIME_DIR)
    needed = requirement()
    install = (
        "python3",
        "-m",
        "pip",
        "install",
        "--quiet",
        "--target",
        str(target),
        needed,
    )

    return Action(
        "litert",
        f"install the TFLite runtime {needed} into {RUNTIME_DIR} (not packaged by Debian)",
        lambda: (target / "ai_edge_litert").is_dir(),
        lambda: run_command(system, *install),
        lambda: shutil.rmtree(target, ignore_errors=True),
        commands=(" ".join(install),),
    )
