"""Provisioning actions every platform uses (the device group, the models) and the frame of
all actions. Each knows whether it is already done, how to do it and how to undo
it, so provision is idempotent, --dry-run can say what it would do and --undo reverses it.
Everything goes through System (files under its root, its commands)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import ExitCode, NpuctlError
from ..system import System


class ProvisionError(NpuctlError):
    code = ExitCode.USAGE


# What provision runs changes the system (apt-get update and install, pip install on a slow
# board's network): it may take many minutes, and is given an hour before it counts as hung.
COMMAND_TIMEOUT_SECONDS = 3600.0


@dataclass
class Action:
    name: str
    description: str
    is_done: Callable[[], bool]
    apply: Callable[[], None]
    undo: Callable[[], None]
    commands: tuple[str, ...] = ()  # what apply runs or writes, shown by --dry-run


def run_command(system: System, *argv: str) -> None:
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


def write_file(system: System, absolute: str, text: str) -> None:
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
        f"add {user} to group {group} (may open the NPU device; next login)",
        lambda: user in members(),
        lambda: run_command(system, "gpasswd", "-a", user, group),
        lambda: run_command(system, "gpasswd", "-d", user, group),
    )


def models_action(
    system: System, directory: Path, fetch_all: Callable[[], None], pattern: str
) -> Action:
    def undo() -> None:
        shutil.rmtree(directory, ignore_errors=True)

    def is_done() -> bool:
        return directory.is_dir() and any(directory.glob(pattern))

    def apply() -> None:
        directory.mkdir(parents=True, exist_ok=True)
        directory.chmod(0o755)
        fetch_all()

    return Action(
        "models", f"create {directory} and fetch the default models", is_done, apply, undo
    )


@dataclass
class Request:
    """What 'npuctl provision' was asked, for a platform to build its actions from."""

    system: System
    user: str
    group: str
    models_dir: Path
    fetch_models: Callable[[], None]
    options: dict[str, object]  # the platform's own provision options


NFD_LABELS = "/etc/kubernetes/node-feature-discovery/features.d/npuctl"
